// Bounds-checked big-endian reader over a byte buffer, for the pgoutput decoder.
//
// Every read checks the remaining length before touching a byte and returns
// InvalidArgument naming the field it was reading, so a truncated or hostile message
// can never make the decoder read past the buffer (unlike an assert, the check stays
// in release builds). The fast path is a compare, a memcpy and a byte swap; building
// the error message lives out of line, in byte_reader.cc.
//
//   ByteReader reader(bytes);
//   OUTBOXD_ASSIGN_OR_RETURN(uint32_t relation_id, reader.ReadU32("relation id"));
//   OUTBOXD_ASSIGN_OR_RETURN(std::string_view name, reader.ReadCString("name"));
//   OUTBOXD_RETURN_IF_ERROR(reader.ExpectEnd("Insert"));
#ifndef OUTBOXD_PGOUTPUT_INTERNAL_BYTE_READER_H_
#define OUTBOXD_PGOUTPUT_INTERNAL_BYTE_READER_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace outboxd::pgoutput::internal {

class ByteReader {
 public:
  // `bytes` must outlive the reader and every string_view it returns.
  explicit ByteReader(std::string_view bytes)
      : pos_(bytes.data()), end_(bytes.data() + bytes.size()) {}

  size_t remaining() const { return static_cast<size_t>(end_ - pos_); }
  bool empty() const { return pos_ == end_; }

  // `field` names what is being read; it appears only in the error message.
  absl::StatusOr<uint8_t> ReadU8(const char* field) { return ReadInt<uint8_t>(field); }
  absl::StatusOr<uint16_t> ReadU16(const char* field) { return ReadInt<uint16_t>(field); }
  absl::StatusOr<uint32_t> ReadU32(const char* field) { return ReadInt<uint32_t>(field); }
  absl::StatusOr<int32_t> ReadI32(const char* field) { return ReadInt<int32_t>(field); }
  absl::StatusOr<uint64_t> ReadU64(const char* field) { return ReadInt<uint64_t>(field); }
  absl::StatusOr<int64_t> ReadI64(const char* field) { return ReadInt<int64_t>(field); }

  // A NUL-terminated string; the view excludes the NUL, the reader skips past it.
  absl::StatusOr<std::string_view> ReadCString(const char* field) {
    // memchr on a null pointer is undefined even for length 0 (an empty input's data()).
    const void* nul = empty() ? nullptr : std::memchr(pos_, '\0', remaining());
    if (ABSL_PREDICT_FALSE(nul == nullptr)) return Unterminated(field, remaining());
    std::string_view s(pos_, static_cast<const char*>(nul) - pos_);
    pos_ += s.size() + 1;
    return s;
  }

  // Exactly `n` bytes. `n` usually comes from a length field in the input, so it is
  // compared with what is left before anything is sized from it.
  absl::StatusOr<std::string_view> ReadBytes(size_t n, const char* field) {
    if (ABSL_PREDICT_FALSE(n > remaining())) return Truncated(field, n, remaining());
    std::string_view s(pos_, n);
    pos_ += n;
    return s;
  }

  // As ReadBytes, into `out`: a StatusOr<string_view> in a hot loop makes GCC spill
  // it and reload the view with one 16-byte load from two 8-byte stores, a store-
  // forwarding stall that cost the Insert decode about a third of its time.
  absl::Status ReadBytes(size_t n, const char* field, std::string_view& out) {
    if (ABSL_PREDICT_FALSE(n > remaining())) return Truncated(field, n, remaining());
    out = std::string_view(pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }

  // Error unless every byte has been consumed: a message whose layout has ended must
  // not carry trailing bytes (they would mean we mis-parsed it).
  absl::Status ExpectEnd(const char* message) const {
    if (ABSL_PREDICT_FALSE(!empty())) return TrailingBytes(message, remaining());
    return absl::OkStatus();
  }

 private:
  template <typename T>
  absl::StatusOr<T> ReadInt(const char* field) {
    if (ABSL_PREDICT_FALSE(remaining() < sizeof(T))) {
      return Truncated(field, sizeof(T), remaining());
    }
    T value;
    std::memcpy(&value, pos_, sizeof(T));
    pos_ += sizeof(T);
    return FromBigEndian(value);
  }

  template <typename T>
  static T FromBigEndian(T value) {
    if constexpr (sizeof(T) == 1 || std::endian::native == std::endian::big) {
      return value;
    } else if constexpr (sizeof(T) == 2) {
      return static_cast<T>(__builtin_bswap16(static_cast<uint16_t>(value)));
    } else if constexpr (sizeof(T) == 4) {
      return static_cast<T>(__builtin_bswap32(static_cast<uint32_t>(value)));
    } else {
      static_assert(sizeof(T) == 8, "unsupported integer width");
      return static_cast<T>(__builtin_bswap64(static_cast<uint64_t>(value)));
    }
  }

  ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD static absl::Status Truncated(const char* field,
                                                                            size_t need,
                                                                            size_t left);
  ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD static absl::Status Unterminated(const char* field,
                                                                               size_t left);
  ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD static absl::Status TrailingBytes(const char* message,
                                                                                size_t left);

  const char* pos_;
  const char* end_;
};

}  // namespace outboxd::pgoutput::internal

#endif  // OUTBOXD_PGOUTPUT_INTERNAL_BYTE_READER_H_
