// Strict parsing of the DETCOLL_* environment (common/env.h, each layer's loader, and
// bindings/c/config.h putting them together), through a map-backed lookup.

#include "bindings/c/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "fusion/settings.h"
#include "kernels/rng/seed_state.h"

namespace detcoll {
namespace {

using bindings::c::Config;
using bindings::c::loadConfig;

class FakeEnvironment {
 public:
  FakeEnvironment(std::initializer_list<std::pair<const std::string, std::string>> values)
      : values_(values) {}
  EnvLookup lookup() const {
    return [this](const char* name) -> const char* {
      auto it = values_.find(name);
      return it == values_.end() ? nullptr : it->second.c_str();
    };
  }

 private:
  std::map<std::string, std::string> values_;
};

Status load(std::initializer_list<std::pair<const std::string, std::string>> values,
            Config* config) {
  FakeEnvironment env(values);
  return loadConfig(env.lookup(), config);
}

// The failure must be INVALID_ARGUMENT and name both the variable and the value.
void expectRejected(const std::string& name, const std::string& value,
                    const std::string& extraName = "", const std::string& extraValue = "") {
  Config config;
  FakeEnvironment env = extraName.empty() ? FakeEnvironment{{name, value}}
                                          : FakeEnvironment{{name, value}, {extraName, extraValue}};
  const Status status = loadConfig(env.lookup(), &config);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << name << "=" << value;
  EXPECT_NE(status.message().find(name), std::string::npos)
      << name << "=" << value << ": " << status.message();
  EXPECT_NE(status.message().find("'" + value + "'"), std::string::npos)
      << name << "=" << value << ": " << status.message();
}

Config loadOk(std::initializer_list<std::pair<const std::string, std::string>> values) {
  Config config;
  const Status status = load(values, &config);
  EXPECT_TRUE(status.isOk()) << status.toString();
  return config;
}

TEST(EnvTest, DefaultsWhenNothingIsSet) {
  Config config;
  config.engine.fusionThresholdBytes = 1;
  config.engine.cycleTimeMs = 99;
  config.setVariables = {"stale"};
  ASSERT_TRUE(load({}, &config).isOk());
  EXPECT_EQ(config.collective.mode, Mode::kOrdered);
  EXPECT_EQ(config.engine.fusionThresholdBytes, 64ull << 20);
  EXPECT_EQ(config.engine.cycleTimeMs, 1.0);
  EXPECT_EQ(config.logLevel, LogLevel::kWarn);
  EXPECT_EQ(config.engine.timelinePath, "");
  EXPECT_EQ(config.engine.stallWarningSeconds, 60.0);
  EXPECT_EQ(config.engine.stallShutdownSeconds, 600.0);
  EXPECT_TRUE(config.setVariables.empty());
}

TEST(EnvTest, ProcessEnvironmentReadsGetenv) {
  ASSERT_EQ(setenv("DETCOLL_ENV_TEST_PROBE", "value-1", 1), 0);
  const EnvLookup lookup = processEnvironment();
  ASSERT_NE(lookup("DETCOLL_ENV_TEST_PROBE"), nullptr);
  EXPECT_STREQ(lookup("DETCOLL_ENV_TEST_PROBE"), "value-1");
  unsetenv("DETCOLL_ENV_TEST_PROBE");
  EXPECT_EQ(lookup("DETCOLL_ENV_TEST_PROBE"), nullptr);
}

TEST(EnvTest, DeterminismValues) {
  EXPECT_EQ(loadOk({{"DETCOLL_DETERMINISM", "native"}}).collective.mode, Mode::kNative);
  EXPECT_EQ(loadOk({{"DETCOLL_DETERMINISM", "ordered"}}).collective.mode, Mode::kOrdered);
  EXPECT_EQ(loadOk({{"DETCOLL_DETERMINISM", "invariant"}}).collective.mode, Mode::kInvariant);
  for (const char* bad : {"fast", "ordered ", " ordered", "1", "orderedx", "nativ"}) {
    expectRejected("DETCOLL_DETERMINISM", bad);
  }
}

TEST(EnvTest, GpuTransportValues) {
  EXPECT_EQ(loadOk({}).collective.gpuTransport, collective::GpuTransport::kAuto);
  EXPECT_EQ(loadOk({{"DETCOLL_GPU_TRANSPORT", "auto"}}).collective.gpuTransport,
            collective::GpuTransport::kAuto);
  EXPECT_EQ(loadOk({{"DETCOLL_GPU_TRANSPORT", "nccl"}}).collective.gpuTransport,
            collective::GpuTransport::kNccl);
  EXPECT_EQ(loadOk({{"DETCOLL_GPU_TRANSPORT", "mpi"}}).collective.gpuTransport,
            collective::GpuTransport::kMpi);
  for (const char* bad : {"NCCL", "gloo", "nccl ", "host", "0"}) {
    expectRejected("DETCOLL_GPU_TRANSPORT", bad);
  }
}

TEST(EnvTest, InvariantTransportValues) {
  using collective::InvariantTransport;
  EXPECT_EQ(loadOk({}).collective.invariantTransport, InvariantTransport::kAuto);
  const std::pair<const char*, InvariantTransport> known[] = {
      {"auto", InvariantTransport::kAuto},
      {"leaves", InvariantTransport::kLeaves},
      {"encodings", InvariantTransport::kEncodings},
      {"mpi", InvariantTransport::kMpi}};
  for (const auto& [text, transport] : known) {
    const auto config = loadOk({{"DETCOLL_INVARIANT_TRANSPORT", text}});
    EXPECT_EQ(config.collective.invariantTransport, transport) << text;
    // The fusion engine's batches use the same transport.
    EXPECT_EQ(config.engine.invariantTransport, transport) << text;
  }
  for (const char* bad : {"MPI", "nccl", "mpi ", "ring", "1"}) {
    expectRejected("DETCOLL_INVARIANT_TRANSPORT", bad);
  }
}

TEST(EnvTest, FusionThresholdValues) {
  EXPECT_EQ(loadOk({{"DETCOLL_FUSION_THRESHOLD", "0"}}).engine.fusionThresholdBytes, 0u);
  EXPECT_EQ(loadOk({{"DETCOLL_FUSION_THRESHOLD", "1048576"}}).engine.fusionThresholdBytes,
            1048576u);
  for (const char* bad :
       {"-1", "1e3", " 5", "5 ", "64MB", "0x10", "+5", "1.5", "abc", "18446744073709551615",
        "18446744073709551616", "99999999999999999999999"}) {
    expectRejected("DETCOLL_FUSION_THRESHOLD", bad);
  }
}

TEST(EnvTest, CycleTimeValues) {
  EXPECT_EQ(loadOk({{"DETCOLL_CYCLE_TIME", "0"}}).engine.cycleTimeMs, 0.0);
  EXPECT_EQ(loadOk({{"DETCOLL_CYCLE_TIME", "2.5"}}).engine.cycleTimeMs, 2.5);
  EXPECT_EQ(loadOk({{"DETCOLL_CYCLE_TIME", "10"}}).engine.cycleTimeMs, 10.0);
  // 1e308 once overflowed to a cycle of 0 on the way to std::chrono, and 1e9 (11.6 days) froze
  // the engine between cycles.
  for (const char* bad : {"-5", "-0.5", "-0", "fast", "5ms", " 1", "1 ", "nan", "inf", "1e999", ".",
                          "1e308", "1e9"}) {
    expectRejected("DETCOLL_CYCLE_TIME", bad);
  }
}

TEST(EnvTest, LogLevelValuesAreCaseInsensitive) {
  EXPECT_EQ(loadOk({{"DETCOLL_LOG_LEVEL", "info"}}).logLevel, LogLevel::kInfo);
  EXPECT_EQ(loadOk({{"DETCOLL_LOG_LEVEL", "INFO"}}).logLevel, LogLevel::kInfo);
  EXPECT_EQ(loadOk({{"DETCOLL_LOG_LEVEL", "Debug"}}).logLevel, LogLevel::kDebug);
  EXPECT_EQ(loadOk({{"DETCOLL_LOG_LEVEL", "tRaCe"}}).logLevel, LogLevel::kTrace);
  EXPECT_EQ(loadOk({{"DETCOLL_LOG_LEVEL", "none"}}).logLevel, LogLevel::kNone);
  EXPECT_EQ(loadOk({{"DETCOLL_LOG_LEVEL", "error"}}).logLevel, LogLevel::kError);
  EXPECT_EQ(loadOk({{"DETCOLL_LOG_LEVEL", "WaRn"}}).logLevel, LogLevel::kWarn);
  for (const char* bad : {"verbose", "3", "info ", "WARNING"})
    expectRejected("DETCOLL_LOG_LEVEL", bad);

  LogLevel level = LogLevel::kNone;
  EXPECT_TRUE(parseLogLevel("wArN", &level));
  EXPECT_EQ(level, LogLevel::kWarn);
  EXPECT_FALSE(parseLogLevel("", &level));
  EXPECT_EQ(level, LogLevel::kWarn);
}

TEST(EnvTest, TimelineAndStallCheckValues) {
  EXPECT_EQ(loadOk({{"DETCOLL_TIMELINE", "/tmp/timeline.json"}}).engine.timelinePath,
            "/tmp/timeline.json");
  EXPECT_EQ(loadOk({{"DETCOLL_STALL_CHECK_SECONDS", "0"}}).engine.stallWarningSeconds, 0.0);
  EXPECT_EQ(loadOk({{"DETCOLL_STALL_CHECK_SECONDS", "12.5"}}).engine.stallWarningSeconds, 12.5);
  for (const char* bad : {"-1", "soon", "60s"}) expectRejected("DETCOLL_STALL_CHECK_SECONDS", bad);
  EXPECT_EQ(loadOk({{"DETCOLL_STALL_SHUTDOWN_SECONDS", "0"}}).engine.stallShutdownSeconds, 0.0);
  EXPECT_EQ(loadOk({{"DETCOLL_STALL_SHUTDOWN_SECONDS", "2.5"}}).engine.stallShutdownSeconds, 2.5);
  for (const char* bad : {"-3", "never", "1e"}) {
    expectRejected("DETCOLL_STALL_SHUTDOWN_SECONDS", bad);
  }
}

TEST(EnvTest, HorovodVariablesAreUsedWhenOursAreUnset) {
  const Config config = loadOk({{"HOROVOD_FUSION_THRESHOLD", "0"}, {"HOROVOD_CYCLE_TIME", "3.5"}});
  EXPECT_EQ(config.engine.fusionThresholdBytes, 0u);
  EXPECT_EQ(config.engine.cycleTimeMs, 3.5);
  EXPECT_NE(std::find(config.setVariables.begin(), config.setVariables.end(),
                      "HOROVOD_FUSION_THRESHOLD=0"),
            config.setVariables.end());
  EXPECT_NE(
      std::find(config.setVariables.begin(), config.setVariables.end(), "HOROVOD_CYCLE_TIME=3.5"),
      config.setVariables.end());
  // An invalid Horovod value is an error that names the Horovod variable.
  expectRejected("HOROVOD_FUSION_THRESHOLD", "64MB");
  expectRejected("HOROVOD_CYCLE_TIME", "-5");
}

TEST(EnvTest, HorovodVariablesAreIgnoredWhenOursAreSet) {
  const Config config = loadOk({{"DETCOLL_FUSION_THRESHOLD", "4096"},
                                {"HOROVOD_FUSION_THRESHOLD", "0"},
                                {"DETCOLL_CYCLE_TIME", "2"},
                                {"HOROVOD_CYCLE_TIME", "7"}});
  EXPECT_EQ(config.engine.fusionThresholdBytes, 4096u);
  EXPECT_EQ(config.engine.cycleTimeMs, 2.0);
  // Even an invalid Horovod value does not matter once ours is set.
  const Config ignored = loadOk({{"DETCOLL_FUSION_THRESHOLD", "4096"},
                                 {"HOROVOD_FUSION_THRESHOLD", "garbage"},
                                 {"DETCOLL_CYCLE_TIME", "2"},
                                 {"HOROVOD_CYCLE_TIME", "-1"}});
  EXPECT_EQ(ignored.engine.fusionThresholdBytes, 4096u);
  EXPECT_EQ(ignored.engine.cycleTimeMs, 2.0);
  EXPECT_EQ(std::count_if(ignored.setVariables.begin(), ignored.setVariables.end(),
                          [](const std::string& s) { return s.rfind("HOROVOD_", 0) == 0; }),
            0);
  // And an invalid value of ours is reported under our name, not Horovod's.
  expectRejected("DETCOLL_FUSION_THRESHOLD", "64MB", "HOROVOD_FUSION_THRESHOLD", "1024");
  expectRejected("DETCOLL_CYCLE_TIME", "-1", "HOROVOD_CYCLE_TIME", "5");
}

TEST(EnvTest, EmptyValueCountsAsUnset) {
  const Config config = loadOk({{"DETCOLL_DETERMINISM", ""},
                                {"DETCOLL_FUSION_THRESHOLD", ""},
                                {"DETCOLL_CYCLE_TIME", ""},
                                {"DETCOLL_LOG_LEVEL", ""},
                                {"DETCOLL_TIMELINE", ""},
                                {"DETCOLL_STALL_CHECK_SECONDS", ""}});
  EXPECT_EQ(config.collective.mode, Mode::kOrdered);
  EXPECT_EQ(config.engine.fusionThresholdBytes, 64ull << 20);
  EXPECT_EQ(config.engine.cycleTimeMs, 1.0);
  EXPECT_EQ(config.logLevel, LogLevel::kWarn);
  EXPECT_EQ(config.engine.timelinePath, "");
  EXPECT_EQ(config.engine.stallWarningSeconds, 60.0);
  EXPECT_TRUE(config.setVariables.empty());
  // An empty DETCOLL value falls through to the Horovod one.
  const Config fallback = loadOk({{"DETCOLL_FUSION_THRESHOLD", ""},
                                  {"HOROVOD_FUSION_THRESHOLD", "123"},
                                  {"DETCOLL_CYCLE_TIME", ""},
                                  {"HOROVOD_CYCLE_TIME", "4"}});
  EXPECT_EQ(fallback.engine.fusionThresholdBytes, 123u);
  EXPECT_EQ(fallback.engine.cycleTimeMs, 4.0);
}

TEST(EnvTest, SetVariablesListsWhatWasSet) {
  const Config config = loadOk({{"DETCOLL_DETERMINISM", "native"},
                                {"DETCOLL_LOG_LEVEL", "info"},
                                {"UNRELATED_VARIABLE", "1"}});
  std::vector<std::string> sorted = config.setVariables;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted,
            (std::vector<std::string>{"DETCOLL_DETERMINISM=native", "DETCOLL_LOG_LEVEL=info"}));
}

TEST(EnvTest, ParseIntegerIsStrict) {
  const IntegerRange all{0, UINT64_MAX, nullptr};
  uint64_t value = 42;
  for (const char* bad : {"-1", "1e3", " 5", "5 ", "64MB", "", "+1", "0x1f", "1,000",
                          "18446744073709551616", "36893488147419103232"}) {
    const Status status = parseInteger("SOME_VARIABLE", bad, all, &value);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
    EXPECT_NE(status.message().find("SOME_VARIABLE"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find(std::string("'") + bad + "'"), std::string::npos)
        << status.message();
    EXPECT_NE(status.message().find("an integer from 0 to 18446744073709551615"), std::string::npos)
        << status.message();
    EXPECT_EQ(value, 42u) << "a rejected value must not be stored ('" << bad << "')";
  }
  ASSERT_TRUE(parseInteger("X", "18446744073709551615", all, &value).isOk());
  EXPECT_EQ(value, 18446744073709551615ull);
  ASSERT_TRUE(parseInteger("X", "007", all, &value).isOk());
  EXPECT_EQ(value, 7u);
  ASSERT_TRUE(parseInteger("X", "0", all, &value).isOk());
  EXPECT_EQ(value, 0u);

  const IntegerRange some{3, 10, "widgets"};
  for (const char* bad : {"2", "11", "0"}) {
    const Status status = parseInteger("Y", bad, some, &value);
    EXPECT_EQ(status.message(), std::string("invalid value '") + bad +
                                    "' for Y: expected widgets, an integer from 3 to 10");
  }
  ASSERT_TRUE(parseInteger("Y", "3", some, &value).isOk());
  EXPECT_EQ(value, 3u);
  ASSERT_TRUE(parseInteger("Y", "10", some, &value).isOk());
  EXPECT_EQ(value, 10u);
}

TEST(EnvTest, ParseNumberIsStrict) {
  const NumberRange wide{0, 1e300, false, nullptr};
  double value = 42;
  for (const char* bad :
       {"-1",    "-0.001", "-0",   "+1",  "",    " 5", "5 ", "nan", "NAN", "inf", "infinity",
        "1e999", "1e-400", "0x10", "1,5", "5ms", "1e", "e5", "--1", ".",   "1e+", "1.2.3"}) {
    const Status status = parseNumber("SOME_NUMBER", bad, wide, &value);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
    EXPECT_NE(status.message().find("SOME_NUMBER"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("a decimal number from 0 to 1e+300"), std::string::npos)
        << status.message();
    EXPECT_EQ(value, 42.0) << "a rejected value must not be stored ('" << bad << "')";
  }
  ASSERT_TRUE(parseNumber("X", "0.25", wide, &value).isOk());
  EXPECT_EQ(value, 0.25);
  ASSERT_TRUE(parseNumber("X", "1e3", wide, &value).isOk());
  EXPECT_EQ(value, 1000.0);
  ASSERT_TRUE(parseNumber("X", "2.5E-3", wide, &value).isOk());
  EXPECT_EQ(value, 0.0025);
  ASSERT_TRUE(parseNumber("X", "0", wide, &value).isOk());
  EXPECT_EQ(value, 0.0);

  // 0 as a switch below the range; the bounds as the error words them.
  const NumberRange off{0.25, 7.5, true, "hours"};
  ASSERT_TRUE(parseNumber("Y", "0", off, &value).isOk());
  EXPECT_EQ(value, 0.0);
  ASSERT_TRUE(parseNumber("Y", "0.0", off, &value).isOk());
  ASSERT_TRUE(parseNumber("Y", "0.25", off, &value).isOk());
  EXPECT_EQ(value, 0.25);
  ASSERT_TRUE(parseNumber("Y", "7.5", off, &value).isOk());
  EXPECT_EQ(value, 7.5);
  for (const char* bad : {"0.2", "7.51", "1e-300"}) {
    EXPECT_EQ(parseNumber("Y", bad, off, &value).message(),
              std::string("invalid value '") + bad +
                  "' for Y: expected hours, 0 (off) or a decimal number from 0.25 to 7.5");
  }
  EXPECT_EQ(value, 7.5);
}

// Every numeric variable: the ends of its range and just inside are taken (and stored), just
// outside either end, NaN, infinities, huge values and garbage are refused, and the error names
// the variable, the value and the range.
struct NumericVariable {
  const char* name;
  const char* range;                                     // as the error must word it
  std::vector<std::pair<const char*, double>> accepted;  // text, the value stored
  std::vector<const char*> refused;
  double (*stored)(const Config&);
};

std::vector<NumericVariable> numericVariables() {
  const std::vector<const char*> notNumbers = {"nan",   "NaN",    "-nan", "inf", "-inf", "Infinity",
                                               "1e999", "-1e999", "abc",  "1O",  "0x10", "1,5",
                                               " 1",    "1 ",     "--1",  "1e",  "e1",   "."};
  auto refusing = [&](std::vector<const char*> own) {
    own.insert(own.end(), notNumbers.begin(), notNumbers.end());
    return own;
  };
  auto threshold = [](const Config& c) {
    return static_cast<double>(c.engine.fusionThresholdBytes);
  };
  auto cycle = [](const Config& c) { return c.engine.cycleTimeMs; };
  const char* thresholdRange = "bytes, an integer from 0 to 1099511627776";
  const char* cycleRange = "milliseconds, a decimal number from 0 to 1000";
  const char* stallRange = "seconds, 0 (off) or a decimal number from 0.1 to 86400";
  const std::vector<std::pair<const char*, double>> thresholdOk = {
      {"0", 0},
      {"1", 1},
      {"67108864", 67108864},
      {"1099511627775", 1099511627775.0},
      {"1099511627776", 1099511627776.0}};
  const std::vector<const char*> thresholdBad = {
      "-1", "1099511627777", "18446744073709551615", "18446744073709551616", "1e12", "1.5"};
  const std::vector<std::pair<const char*, double>> cycleOk = {
      {"0", 0},       {"0.001", 0.001}, {"1", 1},  {"999.999", 999.999},
      {"1000", 1000}, {"1e3", 1000},    {"0e5", 0}};
  const std::vector<const char*> cycleBad = {"-0.001", "-0",  "-1",    "1000.001",
                                             "1001",   "1e9", "1e308", "1.7976931348623157e308"};
  return {
      {"DETCOLL_FUSION_THRESHOLD", thresholdRange, thresholdOk, refusing(thresholdBad), threshold},
      {"HOROVOD_FUSION_THRESHOLD", thresholdRange, thresholdOk, refusing(thresholdBad), threshold},
      {"DETCOLL_CYCLE_TIME", cycleRange, cycleOk, refusing(cycleBad), cycle},
      {"HOROVOD_CYCLE_TIME", cycleRange, cycleOk, refusing(cycleBad), cycle},
      {"DETCOLL_STALL_CHECK_SECONDS",
       stallRange,
       {{"0", 0},
        {"0.1", 0.1},
        {"0.10001", 0.10001},
        {"60", 60},
        {"86399.9", 86399.9},
        {"86400", 86400}},
       refusing({"-0.1", "-0", "0.099", "1e-9", "86400.01", "1e9", "1e308"}),
       [](const Config& c) { return c.engine.stallWarningSeconds; }},
      {"DETCOLL_STALL_SHUTDOWN_SECONDS",
       stallRange,
       {{"0", 0}, {"0.1", 0.1}, {"2.5", 2.5}, {"86400", 86400}},
       refusing({"-600", "-0", "0.0999", "86401", "8.64e4000", "1e308"}),
       [](const Config& c) { return c.engine.stallShutdownSeconds; }},
      {"DETCOLL_SEED",
       "an integer from 0 to 18446744073709551615",
       {{"0", 0},
        {"1", 1},
        {"18446744073709551614", 18446744073709551614.0},
        {"18446744073709551615", 18446744073709551615.0}},
       refusing({"-1", "18446744073709551616", "99999999999999999999", "1e3", "+5"}),
       [](const Config& c) { return c.seed ? static_cast<double>(*c.seed) : -1.0; }},
  };
}

TEST(EnvTest, EveryNumericVariableHasItsRange) {
  for (const NumericVariable& v : numericVariables()) {
    for (const auto& [text, expected] : v.accepted) {
      const Config config = loadOk({{v.name, text}});
      EXPECT_EQ(v.stored(config), expected) << v.name << "=" << text;
    }
    for (const char* text : v.refused) {
      Config config;
      config.engine.cycleTimeMs = 42;
      const Status status = load({{v.name, text}}, &config);
      EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << v.name << "=" << text;
      EXPECT_EQ(status.message(), std::string("invalid value '") + text + "' for " + v.name +
                                      ": expected " + v.range);
      EXPECT_EQ(config.engine.cycleTimeMs, 42) << "a refused value leaves the config untouched";
    }
  }
}

TEST(EnvTest, ExactSeedValuesAreKept) {
  // Doubles cannot tell 2^64 - 1 from 2^64 - 2: the seed itself, compared as an integer.
  EXPECT_EQ(*loadOk({{"DETCOLL_SEED", "18446744073709551615"}}).seed, UINT64_MAX);
  EXPECT_EQ(*loadOk({{"DETCOLL_SEED", "18446744073709551614"}}).seed, UINT64_MAX - 1);
  EXPECT_FALSE(loadOk({}).seed.has_value());
}

TEST(EnvTest, TheLimitsAreTheDocumentedOnes) {
  // The ranges the README's table states, so that a change of one is a change of the table too.
  EXPECT_EQ(describeRange(fusion::kFusionThresholdRange),
            "bytes, an integer from 0 to 1099511627776");
  EXPECT_EQ(describeRange(fusion::kCycleTimeMsRange),
            "milliseconds, a decimal number from 0 to 1000");
  EXPECT_EQ(describeRange(fusion::kStallSecondsRange),
            "seconds, 0 (off) or a decimal number from 0.1 to 86400");
  EXPECT_EQ(describeRange(kernels::rng::kRootSeedRange),
            "an integer from 0 to 18446744073709551615");
}

TEST(EnvTest, FirstInvalidVariableLeavesConfigUntouched) {
  Config config;
  config.engine.fusionThresholdBytes = 5;
  const Status status =
      load({{"DETCOLL_FUSION_THRESHOLD", "1024"}, {"DETCOLL_LOG_LEVEL", "loud"}}, &config);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("DETCOLL_LOG_LEVEL"), std::string::npos) << status.message();
  EXPECT_EQ(config.engine.fusionThresholdBytes, 5u);
}

}  // namespace
}  // namespace detcoll
