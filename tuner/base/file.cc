#include "tuner/base/file.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "absl/status/status.h"
#include "tuner/base/strings.h"

namespace ktune {
namespace {

bool IsGzip(const std::string& bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

struct InflateDeleter {
  void operator()(z_stream* z) const {
    inflateEnd(z);
    delete z;
  }
};

absl::StatusOr<std::string> Gunzip(const std::string& path, const std::string& in) {
  std::unique_ptr<z_stream, InflateDeleter> z;
  std::string out;
  out.reserve(in.size() * 8);
  std::size_t offset = 0;
  char buf[1 << 16];
  while (offset < in.size()) {
    z.reset(new z_stream{});
    // 16 + MAX_WBITS: expect a gzip header.
    if (inflateInit2(z.get(), 16 + MAX_WBITS) != Z_OK) {
      return absl::InternalError(StrCat(path, ": inflateInit2 failed"));
    }
    z->next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + offset));
    z->avail_in = static_cast<uInt>(in.size() - offset);
    int rc;
    do {
      z->next_out = reinterpret_cast<Bytef*>(buf);
      z->avail_out = sizeof buf;
      rc = inflate(z.get(), Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END) {
        return absl::InvalidArgumentError(
            StrCat(path, ": corrupt gzip data (zlib: ", z->msg ? z->msg : zError(rc), ")"));
      }
      out.append(buf, sizeof buf - z->avail_out);
      if (out.size() > kMaxFileBytes) {
        return absl::ResourceExhaustedError(
            StrCat(path, ": more than ", kMaxFileBytes, " bytes after decompression"));
      }
      if (rc == Z_OK && z->avail_in == 0 && z->avail_out != 0) {
        return absl::InvalidArgumentError(StrCat(path, ": truncated gzip data"));
      }
    } while (rc != Z_STREAM_END);
    offset = in.size() - z->avail_in;
    // Trailing zero padding after the last member is tolerated.
    if (offset < in.size() && !IsGzip(in.substr(offset, 2))) break;
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> ReadFileContents(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) {
      return absl::NotFoundError(StrCat(path, ": no such file"));
    }
    return absl::InvalidArgumentError(StrCat(path, ": ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(StrCat(path, ": not a regular file"));
  }
  if (static_cast<std::size_t>(st.st_size) > kMaxFileBytes) {
    return absl::ResourceExhaustedError(StrCat(path, ": larger than ", kMaxFileBytes, " bytes"));
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::InvalidArgumentError(StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::string bytes(static_cast<std::size_t>(st.st_size), '\0');
  f.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (f.gcount() != static_cast<std::streamsize>(bytes.size())) {
    return absl::InvalidArgumentError(StrCat(path, ": short read"));
  }
  if (IsGzip(bytes)) return Gunzip(path, bytes);
  return bytes;
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  const std::string tmp = StrCat(path, ".tmp.", ::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) {
      return absl::InvalidArgumentError(StrCat(path, ": cannot write: ", std::strerror(errno)));
    }
    f.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      return absl::InternalError(StrCat(path, ": write failed"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return absl::InternalError(StrCat(path, ": rename failed: ", std::strerror(err)));
  }
  return absl::OkStatus();
}

std::string GzipCompress(std::string_view data) {
  z_stream z{};
  // 16 + MAX_WBITS: a gzip header and trailer.
  if (deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    return std::string();
  }
  std::string out(deflateBound(&z, static_cast<uLong>(data.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(rc == Z_STREAM_END ? z.total_out : 0);
  deflateEnd(&z);
  return out;
}

}  // namespace ktune
