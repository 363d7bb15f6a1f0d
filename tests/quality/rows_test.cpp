// kvevict-quality's row specs (bench/quality/rows.hpp): what each spec means, and every error names
// --policies and the bad spec.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli/kvevict_cli.hpp"
#include "rows.hpp"

namespace {

using kvquality::parse_row_spec;
using kvquality::parse_row_specs;

TEST(QualityRows, SpecsParseIntoTheirVariants) {
  const auto kf = parse_row_spec("keyformer");
  EXPECT_EQ(kf.policy, "keyformer");
  EXPECT_TRUE(kf.noise);
  EXPECT_TRUE(kf.seeded());
  EXPECT_FALSE(kf.shared || kf.reindexed || kf.recent || kf.seeds);
  EXPECT_EQ(kf.bounded_chunk, 0u);

  const auto nn = parse_row_spec("keyformer-nonoise+shared@recent=0.5");
  EXPECT_EQ(nn.policy, "keyformer");
  EXPECT_FALSE(nn.noise);
  EXPECT_FALSE(nn.seeded());
  EXPECT_TRUE(nn.shared);
  EXPECT_EQ(*nn.recent, 0.5);
  EXPECT_EQ(nn.recent_text, "0.5");
  EXPECT_EQ(nn.label, "keyformer-nonoise+shared@recent=0.5");

  const auto b = parse_row_spec("h2o+reindexed+bounded32");
  EXPECT_EQ(b.policy, "h2o");
  EXPECT_TRUE(b.reindexed);
  EXPECT_EQ(b.bounded_chunk, 32u);

  const auto s = parse_row_spec("keyformer+bounded32@seeds=3@recent=0.7");
  EXPECT_EQ(*s.seeds, 3u);
  EXPECT_EQ(*s.recent, 0.7);

  const auto o = parse_row_spec("oracle@recent=0.3");
  EXPECT_EQ(o.policy, "oracle");
  EXPECT_EQ(o.budget_policy(), "h2o");
  EXPECT_EQ(parse_row_spec("window").budget_policy(), "window");
  EXPECT_EQ(parse_row_spec("snapkv@recent=0.5").budget_policy(), "snapkv");
  const auto a = parse_row_spec("h2o+mean+adakv@alpha=0.5");
  EXPECT_TRUE(a.adakv && a.mean);
  EXPECT_EQ(*a.adakv_alpha, 0.5f);
  EXPECT_FALSE(parse_row_spec("snapkv+adakv@kernel=15").adakv_alpha.has_value());
  EXPECT_FALSE(parse_row_spec("h2o").adakv);
  const auto ea = parse_row_spec("expected-attention");
  EXPECT_TRUE(ea.expected);
  EXPECT_EQ(ea.policy, "tova");
  EXPECT_FALSE(ea.adakv || parse_row_spec("tova").expected);
  EXPECT_EQ(*parse_row_spec("tova@recent=0.25").recent, 0.25);  // TOVA takes a window from its row only
  EXPECT_TRUE(parse_row_spec("expected-attention+adakv").adakv);
  const auto p = parse_row_spec("keyformer+pyramid@seeds=3");
  EXPECT_TRUE(p.pyramid);
  EXPECT_FALSE(p.shared || p.reindexed);

  EXPECT_TRUE(parse_row_spec("h2o+mean@recent=0").mean);
  EXPECT_TRUE(parse_row_spec("keyformer-nonoise+mean").mean);
  EXPECT_FALSE(parse_row_spec("keyformer").mean);

  const auto sk = parse_row_spec("snapkv@kernel=11@decode=keyformer@seeds=2");  // @decode before @seeds not needed
  EXPECT_EQ(sk.policy, "snapkv");
  EXPECT_EQ(*sk.snap_kernel, 11u);
  EXPECT_EQ(sk.snap_decode, "keyformer");
  EXPECT_TRUE(sk.seeded());
  EXPECT_EQ(*sk.seeds, 2u);
  const auto sh = parse_row_spec("snapkv@decode=h2o");
  EXPECT_FALSE(sh.seeded());
  EXPECT_FALSE(sh.snap_kernel);
  EXPECT_TRUE(parse_row_spec("snapkv").snap_decode.empty());
  EXPECT_EQ(*parse_row_spec("keyformer@noise=0.25").noise_scale, 0.25f);
  EXPECT_EQ(*parse_row_spec("snapkv@decode=keyformer@noise=0.5").noise_scale, 0.5f);
  EXPECT_FALSE(parse_row_spec("keyformer").noise_scale);
}

void expect_error(const std::string& spec, const std::string& needle) {
  try {
    parse_row_spec(spec);
    ADD_FAILURE() << spec << ": no error";
  } catch (const kvcli::UsageError& e) {
    EXPECT_EQ(e.flag(), "--policies") << spec;
    const std::string what = e.what();
    EXPECT_NE(what.find("row '" + spec + "'"), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

TEST(QualityRows, BadSpecsNameTheFlagTheSpecAndThePart) {
  expect_error("", "empty spec");
  expect_error("keyformr", "unknown base 'keyformr'");
  expect_error("h2o+sharde", "unknown modifier '+sharde'");
  expect_error("h2o+shared+shared", "modifier '+shared' given twice");
  expect_error("h2o+bounded0", "unknown modifier '+bounded0'");
  expect_error("h2o+boundedx", "unknown modifier '+boundedx'");
  expect_error("h2o+bounded8+bounded16", "two +bounded modifiers");
  expect_error("oracle+shared", "the oracle takes no modifier ('+shared')");
  expect_error("oracle+pyramid", "the oracle takes no modifier ('+pyramid')");
  expect_error("h2o+pyramid+pyramid", "modifier '+pyramid' given twice");
  expect_error("tova+mean", "+mean needs h2o, keyformer or keyformer-nonoise");
  expect_error("snapkv+mean", "+mean needs h2o, keyformer or keyformer-nonoise");
  expect_error("oracle+mean", "+mean needs h2o");
  expect_error("h2o+mean+mean", "modifier '+mean' given twice");
  expect_error("window@recent=0.5", "@recent needs keyformer");
  expect_error("h2o@recent=1.5", "@recent=1.5 must be a fraction of k in [0, 1]");
  expect_error("h2o@recent=abc", "@recent=abc must be a fraction");
  expect_error("h2o@recent", "'@recent' needs a value");
  expect_error("h2o@recent=0.1@recent=0.2", "@recent given twice");
  expect_error("h2o@seeds=3", "@seeds needs keyformer with noise");
  expect_error("keyformer@seeds=0", "@seeds=0 must be an integer in [1, 1000]");
  expect_error("keyformer@seed=3", "unknown key '@seed'");
  expect_error("h2o@kernel=11", "@kernel needs snapkv");
  expect_error("keyformer@noise=0", "@noise=0 must be a noise scale in (0, 1]");
  expect_error("keyformer@noise=1.5", "@noise=1.5 must be a noise scale in (0, 1]");
  expect_error("keyformer@noise=0.5@noise=0.5", "@noise given twice");
  expect_error("h2o@noise=0.5", "@noise needs keyformer with noise");
  expect_error("keyformer-nonoise@noise=0.5", "@noise needs keyformer with noise");
  expect_error("snapkv@kernel=4", "@kernel=4 must be an odd integer");
  expect_error("snapkv@kernel=x", "@kernel=x must be an odd integer");
  expect_error("snapkv@kernel=3@kernel=5", "@kernel given twice");
  expect_error("h2o@decode=keyformer", "@decode needs snapkv");
  expect_error("snapkv@decode=tova", "@decode=tova must be h2o, window or keyformer");
  expect_error("snapkv@decode=h2o@decode=window", "@decode given twice");
  expect_error("knorm+adakv", "+adakv needs a score from the logits");
  expect_error("streaming+adakv", "+adakv needs a score from the logits");
  expect_error("h2o+adakv+shared", "+adakv shares the budget among KV heads");
  expect_error("h2o+adakv+reindexed", "+adakv and +reindexed");
  expect_error("h2o+adakv+bounded32", "+adakv is not supported with +bounded");
  expect_error("expected-attention+reindexed", "expected-attention and +reindexed");
  expect_error("expected-attention+bounded32", "expected-attention needs a one-shot prefill");
  expect_error("expected-attention@recent=0.5", "@recent needs keyformer");
  expect_error("expected-atention", "unknown base 'expected-atention'");
  expect_error("h2o@alpha=0.5", "@alpha needs +adakv");
  expect_error("h2o+adakv@alpha=2", "@alpha=2 must be a share of the key budget in [0, 1]");
  expect_error("h2o+adakv@alpha=0.1@alpha=0.2", "@alpha given twice");
  expect_error("oracle+adakv", "the oracle takes no modifier ('+adakv')");
  expect_error("snapkv@decode=h2o@seeds=3", "@seeds needs keyformer with noise, or snapkv@decode=keyformer");
}

TEST(QualityRows, ListNeedsRowsAndRejectsDuplicates) {
  EXPECT_EQ(parse_row_specs({"h2o", "h2o+shared"}).size(), 2u);
  EXPECT_THROW(parse_row_specs({}), kvcli::UsageError);
  try {
    parse_row_specs({"h2o", "oracle", "h2o"});
    ADD_FAILURE() << "no error";
  } catch (const kvcli::UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "--policies: row 'h2o' is given twice");
  }
}

}  // namespace
