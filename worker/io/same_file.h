// Whether two paths name one file, so that a tool can refuse to write its
// output over its own input (zeroshard-tokenize --output, zeroshard train
// --save).
//
// Two existing paths are the same file when they have the same device and
// inode: another spelling (./x and x), a hard link, or a symlink to it. Two
// paths that do not exist yet are the same when their directories are one
// directory (by device and inode) and their last components are equal, so
// that out.bin and ./out.bin are caught before either is written. A path
// that exists is never the same as one that does not.
//
// Reads file metadata only (stat); thread-safe.
#ifndef ZEROSHARD_WORKER_IO_SAME_FILE_H_
#define ZEROSHARD_WORKER_IO_SAME_FILE_H_

#include <string>

namespace zeroshard::io {

bool SameFile(const std::string& a, const std::string& b);

}  // namespace zeroshard::io

#endif  // ZEROSHARD_WORKER_IO_SAME_FILE_H_
