{
  "targets": [
    {
      "target_name": "weightcast_native",
      "sources": ["native/module.c", "native/socket-options.c", "native/buffer-address.c", "native/congestion-control.c"],
      "cflags": ["-O2", "-Wall", "-Wextra"]
    }
  ]
}
