// The object behind a zs_member handle: a MembershipClient over the
// connection of the client it was created from (kept alive by it).
//
// Threading: MembershipClient is thread-safe.
#ifndef ZEROSHARD_CLIENT_CAPI_MEMBER_HANDLE_H_
#define ZEROSHARD_CLIENT_CAPI_MEMBER_HANDLE_H_

#include <memory>
#include <utility>

#include "client/capi/client_handle.h"
#include "client/capi/handles.h"
#include "client/membership_client.h"

namespace zeroshard::capi {

class MemberHandle : public Handle {
 public:
  static constexpr Kind kKind = Kind::kMember;

  MemberHandle(std::shared_ptr<ClientHandle> client,
               std::unique_ptr<MembershipClient> membership)
      : Handle(kKind),
        client_(std::move(client)),
        membership_(std::move(membership)) {}

  MembershipClient* membership() const { return membership_.get(); }

 private:
  // Declared first: destroyed after the membership that uses it.
  const std::shared_ptr<ClientHandle> client_;
  const std::unique_ptr<MembershipClient> membership_;
};

}  // namespace zeroshard::capi

#endif  // ZEROSHARD_CLIENT_CAPI_MEMBER_HANDLE_H_
