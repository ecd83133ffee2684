/*
 * The TCP congestion control of one socket, which Node.js cannot set: src/util/tcp-congestion.ts
 * sets it on the connections peers open to an agent (what the agent sends them), and works without
 * this module.
 *
 * setCongestionControl(fd, name) -> 0, or the errno of setsockopt (ENOENT: the kernel has no such
 * algorithm; EPERM: not in net.ipv4.tcp_allowed_congestion_control for this user).
 * congestionControl(fd) -> the socket's algorithm, or undefined when it cannot be read.
 */

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>

#include "weightcast-native.h"

/* The kernel's TCP_CA_NAME_MAX (16) with its terminating zero; one more to see a longer name. */
#define NAME_BUFFER 17

napi_value wc_set_congestion_control(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value args[2];
  int32_t fd = -1;
  char name[NAME_BUFFER];
  size_t length = 0;
  int error = EINVAL;
  napi_value result;
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) == napi_ok && argc == 2 &&
      napi_get_value_int32(env, args[0], &fd) == napi_ok && fd >= 0 &&
      napi_get_value_string_utf8(env, args[1], name, sizeof name, &length) == napi_ok && length >= 1 &&
      length < NAME_BUFFER - 1) {
    error = setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, (socklen_t)length) == 0 ? 0 : errno;
  }
  if (napi_create_int32(env, error, &result) != napi_ok) return NULL;
  return result;
}

napi_value wc_congestion_control(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value args[1];
  int32_t fd = -1;
  char name[NAME_BUFFER];
  socklen_t length = sizeof name - 1;
  napi_value result;
  memset(name, 0, sizeof name);
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) == napi_ok && argc == 1 &&
      napi_get_value_int32(env, args[0], &fd) == napi_ok && fd >= 0 &&
      getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &length) == 0) {
    if (napi_create_string_utf8(env, name, strnlen(name, sizeof name - 1), &result) != napi_ok) return NULL;
    return result;
  }
  if (napi_get_undefined(env, &result) != napi_ok) return NULL;
  return result;
}
