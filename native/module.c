/*
 * The native helper's module: what Node.js cannot do from JavaScript, each in its own file and
 * loaded by src/util/native-helper.ts; every caller works without it (the module is optional).
 */

#include <node_api.h>

#include "weightcast-native.h"

static int export_function(napi_env env, napi_value exports, const char *name, napi_callback callback) {
  napi_value fn;
  if (napi_create_function(env, name, NAPI_AUTO_LENGTH, callback, NULL, &fn) != napi_ok) return 0;
  return napi_set_named_property(env, exports, name, fn) == napi_ok;
}

NAPI_MODULE_INIT() {
  if (!export_function(env, exports, "setReceiveLowWater", wc_set_receive_low_water)) return NULL;
  if (!export_function(env, exports, "addressModulo", wc_address_modulo)) return NULL;
  if (!export_function(env, exports, "setCongestionControl", wc_set_congestion_control)) return NULL;
  if (!export_function(env, exports, "congestionControl", wc_congestion_control)) return NULL;
  return exports;
}
