/* Preloaded (LD_PRELOAD) into a client: the first ZS_REFUSE_COUNT (default
 * 1) connect() calls to port ZS_REFUSE_PORT fail with ENOENT, the way gRPC
 * 1.51 reports a connection whose errno it read too late, or refused ones
 * while a server restarts. Everything else goes to the real connect(). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>

static int refused;

int connect(int fd, const struct sockaddr* addr, socklen_t len) {
  static int (*real)(int, const struct sockaddr*, socklen_t);
  const char* port = getenv("ZS_REFUSE_PORT");
  const char* count = getenv("ZS_REFUSE_COUNT");
  int to = -1;
  if (real == NULL) {
    *(void**)&real = dlsym(RTLD_NEXT, "connect");
  }
  if (addr != NULL && addr->sa_family == AF_INET6) {
    to = ntohs(((const struct sockaddr_in6*)addr)->sin6_port);
  } else if (addr != NULL && addr->sa_family == AF_INET) {
    to = ntohs(((const struct sockaddr_in*)addr)->sin_port);
  }
  if (port != NULL && to == atoi(port) &&
      __atomic_fetch_add(&refused, 1, __ATOMIC_SEQ_CST) <
          (count != NULL ? atoi(count) : 1)) {
    errno = ENOENT;
    return -1;
  }
  return real(fd, addr, len);
}
