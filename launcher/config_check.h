// `zeroshard config check ds.json [flags]`: resolves a DeepSpeed config as
// `zeroshard train` would with the same flags (--workers, the model's
// flags, --steps, and the flags that fill "auto": --learning_rate,
// --precision, ... worker/config/auto_inputs.h) and prints every key, its
// value and where it came from (file / auto←flag / auto←model / default /
// derived), the warnings, and the server flags of an NVMe offload. Starts
// nothing and reads no data.
//
//   $ zeroshard config check hf_zero3.json --learning_rate=3e-4
//       --precision=bf16 --per_device_train_batch_size=4 --steps=1000
//   hf_zero3.json for 2 workers: OK
//     key                       value   from
//     train_batch_size          8       derived (...)
//     optimizer.params.lr       0.0003  auto←--learning_rate
//     ...
//
// Exit codes: 0 the config resolves (warnings may be printed); 2 it does
// not (the error, naming the key or flag, on stderr) or a bad command
// line. Output to stdout; errors to stderr.
#ifndef ZEROSHARD_LAUNCHER_CONFIG_CHECK_H_
#define ZEROSHARD_LAUNCHER_CONFIG_CHECK_H_

namespace zeroshard {

// argv[1] is "config". Returns the exit code.
int RunConfigCommand(int argc, char** argv);

}  // namespace zeroshard

#endif  // ZEROSHARD_LAUNCHER_CONFIG_CHECK_H_
