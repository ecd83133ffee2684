/*
 * Where a buffer's bytes sit in memory, modulo a power of two: what direct I/O must know to align a
 * piece buffer (O_DIRECT wants the address aligned to the device's logical block size) and what
 * JavaScript cannot read. src/piece/direct-io.ts uses it when this module was built, and otherwise
 * finds an aligned start by trying direct writes.
 *
 * addressModulo(typedArray, modulus) -> the address of its first byte modulo `modulus` (a power of
 * two up to 1 GiB), or -1 for anything else.
 */

#include <stdint.h>
#include <node_api.h>

#include "weightcast-native.h"

napi_value wc_address_modulo(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value args[2];
  napi_typedarray_type type;
  size_t length = 0;
  void *data = NULL;
  napi_value array_buffer;
  size_t byte_offset = 0;
  int32_t modulus = 0;
  int32_t answer = -1;
  bool is_typed_array = false;
  napi_value result;
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) == napi_ok && argc == 2 &&
      napi_is_typedarray(env, args[0], &is_typed_array) == napi_ok && is_typed_array &&
      napi_get_value_int32(env, args[1], &modulus) == napi_ok && modulus > 0 && modulus <= (1 << 30) &&
      (modulus & (modulus - 1)) == 0 &&
      napi_get_typedarray_info(env, args[0], &type, &length, &data, &array_buffer, &byte_offset) == napi_ok &&
      data != NULL) {
    /* `data` is already the first byte of the view (the buffer's start plus its byte offset). */
    answer = (int32_t)((uintptr_t)data & (uintptr_t)(modulus - 1));
  }
  if (napi_create_int32(env, answer, &result) != napi_ok) return NULL;
  return result;
}
