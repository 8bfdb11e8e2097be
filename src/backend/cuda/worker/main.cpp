// alloy-nvrtc-worker: compiles NVRTC programs for the Alloy runtime that started it, one request
// at a time, read from its stdin (a socket) and answered there (src/backend/cuda/nvrtc_wire.h,
// docs/nvrtc-workers.md). Not meant to be run by hand: EOF on stdin ends it.
#include <sys/socket.h>

#include "backend/cuda/nvrtc_wire.h"

int main(int argc, char** argv) {
  // The runtime gives a socket as stdin, for both directions; over pipes (by hand, in a test of
  // the protocol), replies go to stdout.
  int type = 0;
  socklen_t len = sizeof type;
  bool socket = ::getsockopt(0, SOL_SOCKET, SO_TYPE, &type, &len) == 0;
  return alloy::cuda::nvrtc::wire::worker_main(0, socket ? 0 : 1, argc, argv);
}
