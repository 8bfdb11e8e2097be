// The NVRTC compile worker's protocol (docs/nvrtc-workers.md): what the runtime and a worker
// process (alloy-nvrtc-worker, src/backend/cuda/worker/) exchange over the worker's stdin, a
// Unix stream socket. Both ends are the same build of Alloy, so numbers are in host byte order.
//
//   frame   = u32 payload length (at most kMaxFrame) + payload
//   payload = u8 type + fields; str = u32 length + bytes
//   Hello   'H': u32 protocol, str NVRTC library loaded ("" when none), str why not
//   Request 'Q': u32 flags (test hooks), u8 cubin, str source, str program name,
//                u32 header count + (str name, str text) each, u32 option count + str each
//   Reply   'R': u8 status (ReplyStatus), str image, str log, str message
//
// The worker writes Hello when it starts, then answers each Request with one Reply; EOF on its
// stdin ends it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace alloy::cuda::nvrtc::wire {

constexpr uint32_t kProtocol = 1;
constexpr uint32_t kMaxFrame = 1u << 30;

/// Request flags: test hooks only (never set outside tests).
enum RequestFlags : uint32_t {
  kExitBeforeReply = 1,  // the worker exits after reading the request, as a crash would
  kGarbageReply = 2,     // the worker answers with a frame that is not a reply
};

enum class ReplyStatus : uint8_t {
  kOk = 0,
  kCompileFailure = 1,  // NVRTC rejected the source: message = what(), log = NVRTC's log
  kNvrtcError = 2,      // NVRTC failed otherwise (alloy::Error): message
  kWorkerError = 3,     // the worker could not do it (bad request, out of memory): retry here
};

struct Hello {
  uint32_t protocol = kProtocol;
  std::string library;
  std::string load_error;
};

struct Request {
  uint32_t flags = 0;
  bool cubin = true;
  std::string source;
  std::string program_name;
  std::vector<std::pair<std::string, std::string>> headers;  // (name, text)
  std::vector<std::string> options;
};

struct Reply {
  ReplyStatus status = ReplyStatus::kOk;
  std::string image;
  std::string log;
  std::string message;
};

/// Payloads (without the length prefix).
std::string encode(const Hello& h);
std::string encode(const Request& r);
std::string encode(const Reply& r);
/// nullopt when `payload` is not a well-formed message of that type (never throws on bad bytes).
std::optional<Hello> decode_hello(const std::string& payload);
std::optional<Request> decode_request(const std::string& payload);
std::optional<Reply> decode_reply(const std::string& payload);

/// Writes one frame (length + payload) to a socket or pipe: false when the peer is gone (no
/// SIGPIPE). Retries partial writes and EINTR.
bool write_frame(int fd, const std::string& payload);
/// Reads one frame: "eof" when the peer closed before a frame began, "error" on a read error,
/// a truncated frame or a length over kMaxFrame; "" on success. `timeout_ms` < 0: no limit
/// (otherwise for the whole frame: "timeout").
std::string read_frame(int fd, std::string* payload, int timeout_ms = -1);

/// The worker process: sends Hello on `out`, then answers the requests read from `in` until EOF
/// (the runtime passes one socket as both). argv may hold `--nvrtc <library>` (the library the
/// parent loaded, tried first). Returns the exit status.
int worker_main(int in, int out, int argc, char** argv);

}  // namespace alloy::cuda::nvrtc::wire
