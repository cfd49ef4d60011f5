// Streaming prints decoded text as tokens arrive but never half a UTF-8
// character: a trailing incomplete multi-byte sequence (raw-byte decoders) or
// U+FFFD (lossy decoders, as HF's ByteLevel) is held back for the next token.
#include <gtest/gtest.h>

#include "infer/infer_internal.h"

namespace mtrain::infer {
namespace {

TEST(InferStream, CompletePrefixEndsOnWholeCharacters) {
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix(""), 0u);
  EXPECT_EQ(utf8_complete_prefix("caf\xC3"), 3u);               // é = C3 A9, first byte only
  EXPECT_EQ(utf8_complete_prefix("caf\xC3\xA9"), 5u);           // whole
  EXPECT_EQ(utf8_complete_prefix("\xE2\x82"), 0u);              // € = E2 82 AC
  EXPECT_EQ(utf8_complete_prefix("x\xE2\x82\xAC"), 4u);         // whole
  EXPECT_EQ(utf8_complete_prefix("x\xF0\x9F\x98"), 1u);         // 😀 = F0 9F 98 80
  EXPECT_EQ(utf8_complete_prefix("x\xF0\x9F\x98\x80"), 5u);     // whole
  EXPECT_EQ(utf8_complete_prefix("ok\xEF\xBF\xBD"), 2u);        // a lossy decoder's U+FFFD
  EXPECT_EQ(utf8_complete_prefix("\xC3\xA9\xC3\xA9\xE2"), 4u);  // two é, then a lead byte
}

}  // namespace
}  // namespace mtrain::infer
