// The service-layer fuzz target (service_fuzzer.cc): one input through a
// fresh in-process server's real gRPC handlers, and its seeds.
//
// Errors: an invariant violation prints one line naming the method and the
// status, then aborts (the fuzzing engine keeps the input).
#ifndef ZEROSHARD_TESTS_FUZZ_SERVICE_FUZZER_H_
#define ZEROSHARD_TESTS_FUZZ_SERVICE_FUZZER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zeroshard::fuzz {

// Runs one input (format in service_fuzzer.cc).
void RunOne(const uint8_t* data, size_t size);

// "Method=ok/made ..." over every call RunOne made so far.
std::string CallSummary();

// Valid step sequences and typical misuse, in the input format: register,
// write, gather, push, prepare, commit, checkpoint and restore; membership
// join, heartbeat, rendezvous and leave; a second shard; malformed bodies.
std::vector<std::string> SeedInputs();

}  // namespace zeroshard::fuzz

#endif  // ZEROSHARD_TESTS_FUZZ_SERVICE_FUZZER_H_
