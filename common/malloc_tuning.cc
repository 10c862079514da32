#include "common/malloc_tuning.h"

#include <cstdlib>  // defines __GLIBC__ on glibc systems

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace zeroshard {

bool TuneMallocForTransfers() {
#if defined(__GLIBC__)
  bool ok = mallopt(M_MMAP_THRESHOLD, 16 << 20) == 1;
  ok &= mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
  ok &= mallopt(M_TOP_PAD, 64 << 20) == 1;
  ok &= mallopt(M_ARENA_MAX, 1) == 1;
  return ok;
#else
  return true;
#endif
}

}  // namespace zeroshard
