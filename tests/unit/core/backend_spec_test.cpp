// comm.backend's text: the CPU's backend alone, or a backend per device type as c10d writes
// them; anything else is a ConfigError naming the key, found when the configuration is read.
#include "loom/core/backend_spec.h"

#include <gtest/gtest.h>

#include "loom/core/config.h"
#include "loom/core/error.h"

namespace loom {
namespace {

// The `problem` field of the ConfigError parsing `text` throws ("" for none).
std::string problem_parsing(const std::string& text) {
  try {
    parse_backend_spec(text, "comm.backend");
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "comm.backend");
    return e.fields().at("problem");
  }
  return "";
}

TEST(BackendSpec, ABareNameIsTheCpusAndTheRestIsAuto) {
  for (const std::string name : {"auto", "shm", "tcp"}) {
    const BackendSpec spec = parse_backend_spec(name, "comm.backend");
    EXPECT_EQ(spec.cpu, name);
    EXPECT_EQ(spec.cuda, "auto");
  }
}

TEST(BackendSpec, EachDeviceTypeNamesItsOwn) {
  BackendSpec spec = parse_backend_spec("cpu:tcp,cuda:nccl", "comm.backend");
  EXPECT_EQ(spec.cpu, "tcp");
  EXPECT_EQ(spec.cuda, "nccl");
  spec = parse_backend_spec("cuda:host", "comm.backend");
  EXPECT_EQ(spec.cpu, "auto");
  EXPECT_EQ(spec.cuda, "host");
  spec = parse_backend_spec("shm,cuda:auto", "comm.backend");
  EXPECT_EQ(spec.cpu, "shm");
  EXPECT_EQ(spec.cuda, "auto");
}

TEST(BackendSpec, WhatIsNoBackendIsRefusedNamingTheKey) {
  for (const std::string text : {"gloo", "", "cpu:nccl", "cuda:shm", "tpu:xla", "shm,cpu:tcp",
                                 "cuda:nccl,cuda:host", "shm,", "cuda"}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(problem_parsing(text), "backend");
  }
}

TEST(BackendSpec, TheConfigurationIsCheckedWhenRead) {
  try {
    parse_config("comm: {backend: 'cpu:shm,cuda:gloo'}\n", "test.yaml", {});
    FAIL() << "cuda:gloo was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "comm.backend");
    EXPECT_EQ(e.fields().at("problem"), "backend");
  }
  EXPECT_EQ(parse_config("comm: {backend: 'cpu:shm,cuda:host'}\n", "test.yaml", {}).comm.backend,
            "cpu:shm,cuda:host");
}

}  // namespace
}  // namespace loom
