// This machine's host name, for logs and names (a pod's name on Kubernetes,
// where $HOSTNAME is the pod name).
#ifndef ZEROSHARD_COMMON_HOSTNAME_H_
#define ZEROSHARD_COMMON_HOSTNAME_H_

#include <string>

namespace zeroshard {

// $HOSTNAME if set, else gethostname(); "" when neither gives one.
std::string LocalHostname();

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_HOSTNAME_H_
