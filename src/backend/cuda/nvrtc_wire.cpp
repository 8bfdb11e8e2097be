#include "backend/cuda/nvrtc_wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>

#include "alloy/errors.h"
#include "backend/cuda/nvrtc.h"

namespace alloy::cuda::nvrtc::wire {
namespace {

constexpr char kHello = 'H';
constexpr char kRequest = 'Q';
constexpr char kReply = 'R';

class Writer {
 public:
  explicit Writer(char type) { out_.push_back(type); }
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// Every read is bounds-checked: a short or malformed payload makes ok() false.
class Reader {
 public:
  Reader(const std::string& in, char type) : in_(in) {
    ok_ = !in_.empty() && in_[0] == type;
    pos_ = 1;
  }
  uint8_t u8() {
    if (!need(1)) return 0;
    return static_cast<uint8_t>(in_[pos_++]);
  }
  uint32_t u32() {
    uint32_t v = 0;
    if (!need(sizeof v)) return 0;
    std::memcpy(&v, in_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string str() {
    uint32_t n = u32();
    if (!need(n)) return {};
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  // A count of items each at least `min_bytes` long: larger than what is left means corrupt.
  uint32_t count(size_t min_bytes) {
    uint32_t n = u32();
    if (ok_ && n > (in_.size() - pos_) / min_bytes) ok_ = false;
    return ok_ ? n : 0;
  }
  bool done() const { return ok_ && pos_ == in_.size(); }

 private:
  bool need(size_t n) {
    if (ok_ && in_.size() - pos_ < n) ok_ = false;
    return ok_;
  }
  const std::string& in_;
  size_t pos_ = 0;
  bool ok_ = false;
};

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == ENOTSOCK) w = ::write(fd, p, n);  // a pipe (SIGPIPE is the caller's)
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// "" when all `n` bytes were read; "eof" (nothing read), "error" or "timeout".
std::string read_all(int fd, char* p, size_t n,
                     std::optional<std::chrono::steady_clock::time_point> deadline) {
  size_t got = 0;
  while (got < n) {
    if (deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      *deadline - std::chrono::steady_clock::now())
                      .count();
      if (left <= 0) return "timeout";
      pollfd pfd{fd, POLLIN, 0};
      int r = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) return "timeout";
      if (r < 0) return "error";
    }
    ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == ECONNRESET && got == 0) return "eof";  // the peer died with data unread
    if (r < 0) return "error";
    if (r == 0) return got == 0 ? "eof" : "error";
    got += static_cast<size_t>(r);
  }
  return "";
}

// The folder this worker's NVRTC keeps PCH files in: <the runtime's folder>/<this pid>, made at
// the first compile that needs it; "" when the runtime gave none or it cannot be made (no PCH).
std::string pch_dir_for_this_worker(const std::string& root) {
  static const std::string dir = [&root]() -> std::string {
    if (root.empty()) return "";
    std::string d = root + "/" + std::to_string(::getpid());
    if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) return "";
    return d;
  }();
  return dir;
}

Reply compile_request(const Request& q, const std::string& pch_root) {
  Reply reply;
  std::vector<Header> headers;
  headers.reserve(q.headers.size());
  for (const auto& [name, text] : q.headers) headers.push_back({name.c_str(), text.c_str()});
  try {
    // NVRTC's automatic PCH only in the folder the runtime gave (nvrtc::worker_pch_options):
    // this process ends with _exit (below), and NVRTC removes its own PCH folder only at exit.
    const bool pch = std::find(q.options.begin(), q.options.end(), kAutoPch) != q.options.end();
    reply.image = compile_in_process(
        q.source, q.program_name, headers,
        worker_pch_options(q.source, q.options, pch ? pch_dir_for_this_worker(pch_root) : ""),
        q.cubin, &reply.log);
  } catch (const CompileFailure& e) {
    reply.status = ReplyStatus::kCompileFailure;
    reply.message = e.what();
    reply.log = e.log();
  } catch (const Error& e) {
    reply.status = ReplyStatus::kNvrtcError;
    reply.message = e.what();
  } catch (const std::exception& e) {
    reply.status = ReplyStatus::kWorkerError;
    reply.message = e.what();
  }
  return reply;
}

}  // namespace

std::string encode(const Hello& h) {
  Writer w(kHello);
  w.u32(h.protocol);
  w.str(h.library);
  w.str(h.load_error);
  return w.take();
}

std::string encode(const Request& r) {
  Writer w(kRequest);
  w.u32(r.flags);
  w.u8(r.cubin ? 1 : 0);
  w.str(r.source);
  w.str(r.program_name);
  w.u32(static_cast<uint32_t>(r.headers.size()));
  for (const auto& [name, text] : r.headers) {
    w.str(name);
    w.str(text);
  }
  w.u32(static_cast<uint32_t>(r.options.size()));
  for (const auto& o : r.options) w.str(o);
  return w.take();
}

std::string encode(const Reply& r) {
  Writer w(kReply);
  w.u8(static_cast<uint8_t>(r.status));
  w.str(r.image);
  w.str(r.log);
  w.str(r.message);
  return w.take();
}

std::optional<Hello> decode_hello(const std::string& payload) {
  Reader in(payload, kHello);
  Hello h;
  h.protocol = in.u32();
  h.library = in.str();
  h.load_error = in.str();
  if (!in.done()) return std::nullopt;
  return h;
}

std::optional<Request> decode_request(const std::string& payload) {
  Reader in(payload, kRequest);
  Request r;
  r.flags = in.u32();
  uint8_t cubin = in.u8();
  r.cubin = cubin != 0;
  r.source = in.str();
  r.program_name = in.str();
  uint32_t headers = in.count(8);
  for (uint32_t i = 0; i < headers; ++i) {
    std::string name = in.str();
    std::string text = in.str();
    r.headers.emplace_back(std::move(name), std::move(text));
  }
  uint32_t options = in.count(4);
  for (uint32_t i = 0; i < options; ++i) r.options.push_back(in.str());
  if (!in.done() || cubin > 1) return std::nullopt;
  return r;
}

std::optional<Reply> decode_reply(const std::string& payload) {
  Reader in(payload, kReply);
  Reply r;
  uint8_t status = in.u8();
  r.image = in.str();
  r.log = in.str();
  r.message = in.str();
  if (!in.done() || status > static_cast<uint8_t>(ReplyStatus::kWorkerError)) return std::nullopt;
  r.status = static_cast<ReplyStatus>(status);
  return r;
}

bool write_frame(int fd, const std::string& payload) {
  if (payload.size() > kMaxFrame) return false;
  uint32_t n = static_cast<uint32_t>(payload.size());
  // One buffer, one write for small frames.
  std::string frame(reinterpret_cast<const char*>(&n), sizeof n);
  frame += payload;
  return write_all(fd, frame.data(), frame.size());
}

std::string read_frame(int fd, std::string* payload, int timeout_ms) {
  std::optional<std::chrono::steady_clock::time_point> deadline;
  if (timeout_ms >= 0) {
    deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  }
  uint32_t n = 0;
  std::string why = read_all(fd, reinterpret_cast<char*>(&n), sizeof n, deadline);
  if (!why.empty()) return why;
  if (n > kMaxFrame) return "error";
  try {
    payload->resize(n);
  } catch (const std::bad_alloc&) {
    return "error";
  }
  why = read_all(fd, payload->data(), n, deadline);
  return why == "eof" ? "error" : why;
}

constexpr int kWorkerPchLimit = 4;  // PCHs per worker (distinct prefix and options) by default

int worker_main(int in, int out, int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  std::string pch_root;  // the runtime's folder for the workers' PCH files ("": no PCH)
  for (int i = 1; i + 1 < argc; ++i) {
    // The parent's NVRTC first: the same library compiles here (setenv before NVRTC is loaded,
    // while this process has one thread).
    if (std::strcmp(argv[i], "--nvrtc") == 0 && argv[i + 1][0]) {
      ::setenv("ALLOY_NVRTC_LIBRARY", argv[i + 1], 1);
    }
    if (std::strcmp(argv[i], "--pch-dir") == 0) pch_root = argv[i + 1];
  }
  // Each worker keeps PCH files of its own (8-14 MB each, NVRTC cannot share one between
  // processes): fewer prefixes than a process's default 16 unless ALLOY_NVRTC_PCH says otherwise,
  // so that 15 workers hold at most 60 in $TMPDIR (docs/nvrtc-workers.md).
  if (!pch_root.empty() && !std::getenv("ALLOY_NVRTC_PCH"))
    ::setenv("ALLOY_NVRTC_PCH", std::to_string(kWorkerPchLimit).c_str(), 1);
  Hello hello;
  if (available()) {
    hello.library = library_path();
  } else {
    hello.load_error = load_error();
  }
  if (!write_frame(out, encode(hello)) || hello.library.empty()) return 1;
  // The parent gone (its end closed) ends this process at once, even in the middle of a compile:
  // a worker never outlives the runtime that started it.
  std::thread([in] {
    for (;;) {
      pollfd pfd{in, POLLRDHUP, 0};
      int r = ::poll(&pfd, 1, -1);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 || (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) ::_exit(0);
    }
  }).detach();
  std::string payload;
  for (;;) {
    std::string why = read_frame(in, &payload);
    if (why == "eof") return 0;
    if (!why.empty()) return 2;
    auto request = decode_request(payload);
    Reply reply;
    if (!request) {
      reply.status = ReplyStatus::kWorkerError;
      reply.message = "malformed request";
    } else if (request->flags & kExitBeforeReply) {
      ::_exit(3);
    } else if (request->flags & kGarbageReply) {
      if (!write_frame(out, "garbage")) return 0;
      continue;
    } else {
      try {
        reply = compile_request(*request, pch_root);
      } catch (...) {  // out of memory building the reply
        reply = Reply{ReplyStatus::kWorkerError, "", "", "the worker failed"};
      }
    }
    if (!write_frame(out, encode(reply))) return 0;
  }
}

}  // namespace alloy::cuda::nvrtc::wire
