// Tests of the KV view and the owning buffer.
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <Eigen/Core>
#include <gtest/gtest.h>

#include <kvevict/attention/attention_logits.hpp>
#include <kvevict/kv/kv_buffer.hpp>
#include <kvevict/kv/kv_view.hpp>

namespace {

TEST(KVView, ContiguousLayoutIsHeadSlotDim) {
  kvevict::KVBuffer<float> buf(2, 3, 4);
  const auto v = buf.view();
  EXPECT_EQ(v.head_stride, 12u);
  EXPECT_EQ(v.slot_stride, 4u);
  EXPECT_EQ(v.k_row(1, 2) - v.k, 1 * 12 + 2 * 4);
  EXPECT_EQ(v.head_positions(1) - v.positions, 3);
}

TEST(KVView, AppendWritesEveryHeadAndIsAllOrNothingWhenFull) {
  kvevict::KVBuffer<float> buf(2, 2, 2);
  auto v = buf.view();
  const float k0[] = {1, 2, 3, 4}, v0[] = {5, 6, 7, 8};
  v.append(10, k0, v0);
  v.append(11, k0, v0);
  EXPECT_EQ(v.length(0), 2u);
  EXPECT_EQ(v.k_row(1, 0)[1], 4.0f);
  EXPECT_EQ(v.v_row(1, 1)[0], 7.0f);
  EXPECT_EQ(v.head_positions(0)[1], 11);
  EXPECT_THROW(v.append(12, k0, v0), std::length_error);
  EXPECT_EQ(v.length(0), 2u);
  EXPECT_EQ(v.length(1), 2u);
  EXPECT_THROW(v.append(12, nullptr, v0), std::invalid_argument);
}

TEST(KVView, ValidateRejectsBadShapes) {
  std::vector<float> k(8), vv(8);
  std::vector<std::int64_t> pos(4);
  std::vector<std::size_t> len(2, 0);
  EXPECT_THROW(kvevict::KVView<float>::contiguous(nullptr, vv.data(), pos.data(), len.data(), 2, 2, 2),
               std::invalid_argument);
  EXPECT_THROW(kvevict::KVView<float>::contiguous(k.data(), vv.data(), pos.data(), len.data(), 0, 2, 2),
               std::invalid_argument);
  EXPECT_THROW(kvevict::KVView<float>::contiguous(k.data(), vv.data(), pos.data(), len.data(), 2, 2, 0),
               std::invalid_argument);
  len[1] = 3;
  EXPECT_THROW(kvevict::KVView<float>::contiguous(k.data(), vv.data(), pos.data(), len.data(), 2, 2, 2),
               std::invalid_argument);
  len[1] = 0;
  auto v = kvevict::KVView<float>::contiguous(k.data(), vv.data(), pos.data(), len.data(), 2, 2, 2);
  v.head_stride = 2;  // heads overlap
  EXPECT_THROW(v.validate(), std::invalid_argument);
  v.head_stride = 2;
  v.slot_stride = 4;  // slot-major [slot][kv_head][head_dim]: valid
  EXPECT_NO_THROW(v.validate());
}

TEST(KVBuffer, RejectsZeroDimensionsAndCountsLiveBytes) {
  EXPECT_THROW(kvevict::KVBuffer<float>(0, 4, 4), std::invalid_argument);
  EXPECT_THROW(kvevict::KVBuffer<float>(1, 0, 4), std::invalid_argument);
  kvevict::KVBuffer<Eigen::half> buf(2, 4, 8);
  const std::vector<Eigen::half> rows(16, Eigen::half(1.0f));
  buf.view().append(0, rows.data(), rows.data());
  EXPECT_EQ(buf.live_kv_bytes(), 2u * 2u * 8u * sizeof(Eigen::half));
}

TEST(AttentionLogits, MatchesHandComputedDotProductsWithGqaAndBias) {
  // 1 KV head, 2 query heads (g = 2), head_dim 2, two slots.
  kvevict::KVBuffer<float> buf(1, 4, 2);
  auto v = buf.view();
  const float k0[] = {1, 0}, k1[] = {0, 2}, zero[] = {0, 0};
  v.append(0, k0, zero);
  v.append(5, k1, zero);
  const float q[] = {3, 4, -1, 1};  // head 0, head 1
  const float bias[] = {0, -1, 0.5f, 0};
  float out[4];
  kvevict::attention_logits(v, q, 2, out, 0.5f, bias);
  EXPECT_FLOAT_EQ(out[0], 1.5f);  // (3*1 + 4*0) * 0.5
  EXPECT_FLOAT_EQ(out[1], 3.0f);  // (8) * 0.5 - 1
  EXPECT_FLOAT_EQ(out[2], 0.0f);  // -0.5 + 0.5
  EXPECT_FLOAT_EQ(out[3], 1.0f);
  EXPECT_THROW(kvevict::attention_logits(v, q, 0, out, 0.5f), std::invalid_argument);
  EXPECT_THROW(kvevict::attention_logits(v, nullptr, 2, out, 0.5f), std::invalid_argument);
}

TEST(AttentionLogits, SixteenBitKeysAreConverted) {
  kvevict::KVBuffer<Eigen::bfloat16> buf(1, 2, 2);
  auto v = buf.view();
  const Eigen::bfloat16 k0[] = {Eigen::bfloat16(0.5f), Eigen::bfloat16(2.0f)};
  v.append(0, k0, k0);
  const float q[] = {2, 1};
  std::vector<float> out(8);  // (GCC 12 warns falsely on Eigen packets over a 4-byte heap block)
  kvevict::attention_logits(v, q, 1, out.data(), 1.0f);
  EXPECT_FLOAT_EQ(out[0], 3.0f);
}

}  // namespace
