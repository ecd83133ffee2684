{
  "targets": [
    {
      "target_name": "weightcast_native",
      "sources": ["native/socket-options.c"],
      "cflags": ["-O2", "-Wall", "-Wextra"]
    }
  ]
}
