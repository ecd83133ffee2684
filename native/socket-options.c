/*
 * The one socket option Node.js cannot set: SO_RCVLOWAT, the number of bytes a TCP socket must hold
 * before the kernel reports it readable. An agent reading a piece at a few MB/s otherwise wakes for
 * every few segments (see src/util/receive-low-water.ts, which loads this module and falls back to
 * Node's own reads when it is not built).
 *
 * setReceiveLowWater(fd, bytes) -> 0, or the errno of setsockopt.
 */

#include <errno.h>
#include <node_api.h>
#include <sys/socket.h>

#include "weightcast-native.h"

napi_value wc_set_receive_low_water(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value args[2];
  int32_t fd = -1;
  int32_t bytes = 1;
  napi_value result;
  int error = EINVAL;
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) == napi_ok && argc == 2 &&
      napi_get_value_int32(env, args[0], &fd) == napi_ok &&
      napi_get_value_int32(env, args[1], &bytes) == napi_ok && fd >= 0 && bytes >= 1) {
    error = setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &bytes, sizeof bytes) == 0 ? 0 : errno;
  }
  if (napi_create_int32(env, error, &result) != napi_ok) return NULL;
  return result;
}
