/* The functions of the native helper (one module, built by node-gyp at install: binding.gyp). */

#ifndef WEIGHTCAST_NATIVE_H
#define WEIGHTCAST_NATIVE_H

#include <node_api.h>

/* socket-options.c */
napi_value wc_set_receive_low_water(napi_env env, napi_callback_info info);
/* congestion-control.c */
napi_value wc_set_congestion_control(napi_env env, napi_callback_info info);
napi_value wc_congestion_control(napi_env env, napi_callback_info info);
/* buffer-address.c */
napi_value wc_address_modulo(napi_env env, napi_callback_info info);

#endif
