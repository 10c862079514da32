/* zeroshard C API: the one stable door into zeroshard for programs in any
 * language (C, Python through ctypes, Rust, Go, ...). One header, one shared
 * library (libzeroshard.so), plain C types only.
 *
 *   zs_client* c;  zs_connect_options o;  zs_connect_options_init(&o);
 *   o.addresses = "127.0.0.1:7000,127.0.0.1:7001";  o.job_id = "demo";
 *   o.insecure = 1;
 *   if (zs_connect(&o, &c) != ZS_OK) puts(zs_last_error());
 *   zs_register(c, &model);                    // tensors, AdamW groups
 *   zs_trainer_create(c, NULL, &topts, &t);    // NULL group: one rank
 *   zs_trainer_start(t, init, 4 * n, NULL, NULL, NULL, &out);
 *   for (;;) {
 *     zs_trainer_after_fetch(t, zs_gather(c, 0, n, ZS_DTYPE_FP32, p, 4 * n,
 *                                         NULL), &out);
 *     if (out.kind != ZS_OUTCOME_OK) continue;  // rolled back: fetch again
 *     ... forward, backward: g ...
 *     zs_push(c, 0, n, ZS_DTYPE_FP32, g, 4 * n, &id);  // id: out.epoch,
 *                                                      // out.state.step
 *     zs_trainer_step(t, &args, NULL, &decision, &out);
 *   }
 *
 * The model's flat layout is its tensors concatenated in the order given to
 * zs_register; every range below is [offset, offset + count) in elements of
 * that flat space. Manual: docs/c_api.md.
 *
 * ERRORS. Every function that can fail returns an int status code: ZS_OK
 * (0) or one of gRPC's / Abseil's canonical codes 1..16 (ZS_INVALID_ARGUMENT
 * ...). The message of the calling thread's last call is zs_last_error();
 * the last error of a handle is copied out by zs_client_error(),
 * zs_trainer_error() or zs_member_error(). Bad input (a NULL, closed or
 * foreign handle, a NULL pointer, a wrong length, a range outside the model,
 * a call out of order) gets an error naming the problem and changes
 * nothing. No C++ exception ever crosses this boundary (ZS_INTERNAL).
 *
 * HANDLES. zs_client, zs_trainer and zs_member are opaque; the library keeps
 * a registry of live handles, so a handle used after it was closed (or
 * never valid) returns ZS_INVALID_ARGUMENT instead of touching freed memory.
 * A closed handle's value is never handed out again. A trainer or member
 * keeps the connection it was created from alive until it is closed itself.
 *
 * THREADING. Client and member functions may be called from any thread at
 * once (the gRPC calls of concurrent gathers and pushes overlap);
 * zs_register and zs_attach are serialised. A trainer takes one call at a
 * time (a concurrent one returns ZS_FAILED_PRECONDITION, never waits), and
 * its calls are collective: every rank makes the same calls in the same
 * order. Callbacks run on the thread that made the call. The functions
 * without a status code (zs_*_init, zs_version, ...) are thread-safe.
 *
 * OWNERSHIP. Strings and buffers passed in are only borrowed for the call
 * (copied where kept). Returned const char* point to static or thread-local
 * storage as stated per function; nothing returned is freed by the caller.
 *
 * VERSIONING. ZS_API_VERSION changes whenever a function or struct of this
 * header changes; a binding checks zs_api_version() at load time.
 */
#ifndef ZEROSHARD_CLIENT_ZEROSHARD_H_
#define ZEROSHARD_CLIENT_ZEROSHARD_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZS_API_VERSION 4
#define ZS_VERSION "0.1.0" /* what zs_version() returns */

/* ----------------------------------------------------------- status codes */

/* gRPC's / Abseil's canonical codes, the same numbers. */
enum {
  ZS_OK = 0,
  ZS_CANCELLED = 1,
  ZS_UNKNOWN = 2,
  ZS_INVALID_ARGUMENT = 3,
  ZS_DEADLINE_EXCEEDED = 4,
  ZS_NOT_FOUND = 5,
  ZS_ALREADY_EXISTS = 6,
  ZS_PERMISSION_DENIED = 7,
  ZS_RESOURCE_EXHAUSTED = 8,
  ZS_FAILED_PRECONDITION = 9,
  ZS_ABORTED = 10,
  ZS_OUT_OF_RANGE = 11,
  ZS_UNIMPLEMENTED = 12,
  ZS_INTERNAL = 13,
  ZS_UNAVAILABLE = 14,
  ZS_DATA_LOSS = 15,
  ZS_UNAUTHENTICATED = 16
};

/* Element types of a buffer (the protocol's DType numbers). */
enum { ZS_DTYPE_FP32 = 1, ZS_DTYPE_BF16 = 2, ZS_DTYPE_FP16 = 3 };

/* The library's version, e.g. "0.1.0" (static storage). Thread-safe. */
const char* zs_version(void);
/* The ZS_API_VERSION the library was built with. Thread-safe. */
int zs_api_version(void);
/* "OK", "INVALID_ARGUMENT", ... for a code; "UNKNOWN_CODE" for others
 * (static storage). Thread-safe. */
const char* zs_status_name(int code);
/* The message of this thread's last zs_* call that returns a status code:
 * "" after ZS_OK, else "<function>: <problem>". Thread-local storage, valid
 * until this thread's next such call. Never NULL. */
const char* zs_last_error(void);

/* ---------------------------------------------------------------- client */

typedef struct zs_client zs_client;
typedef struct zs_trainer zs_trainer;
typedef struct zs_member zs_member;

typedef struct zs_connect_options {
  const char* addresses; /* "host:port,host:port": shard k at the k-th */
  const char* job_id;    /* names the job on the servers (<= 128 bytes of
                            UTF-8; membership takes printable ASCII);
                            NULL or "": none, and the servers' job is
                            not checked against it */
  /* TLS: the CA the servers' certificates chain to; with cert and key,
   * mutual TLS. PEM files. */
  const char* tls_ca_file;
  const char* tls_cert_file;
  const char* tls_key_file;
  /* Bearer token: the value, or a file holding it (not both). Neither:
   * $ZEROSHARD_TOKEN, else the file named by $ZEROSHARD_TOKEN_FILE, else
   * none. A token is sent only over TLS or with insecure = 1. A token
   * given here is held to a token file's rule: at least 16 printable ASCII
   * characters, no spaces or control characters (INVALID_ARGUMENT). */
  const char* token;
  const char* token_file;
  int insecure;            /* 1: plaintext (loopback, tests) */
  double deadline_seconds; /* per RPC attempt (and per prepare); > 0. A
                              server that hangs holds a call for up to
                              deadline_seconds * max_attempts */
  int max_attempts;        /* tries of a failed RPC (UNAVAILABLE, ...); the
                              default 10 span ~5 s, and a retry goes as soon
                              as a lost connection is back */
} zs_connect_options;

/* Fills the defaults: every pointer NULL, insecure 0, deadline 60 s,
 * 10 attempts. */
void zs_connect_options_init(zs_connect_options* options);

/* Creates a client for the servers in options->addresses. No RPC is made:
 * an unreachable server is reported by the first call that needs it.
 * Exactly one of tls_ca_file or insecure = 1 must be given. *out receives a
 * handle to close with zs_close. INVALID_ARGUMENT (a missing or malformed
 * option), NOT_FOUND (a TLS or token file). Thread-safe. */
int zs_connect(const zs_connect_options* options, zs_client** out);
/* Closes the handle; trainers and members created from it keep the
 * connection until they are closed. Does not wait: calls in flight on
 * other threads finish normally on the connection, later calls with the
 * handle are INVALID_ARGUMENT. INVALID_ARGUMENT: not a live client. */
int zs_close(zs_client* client);
/* Copies the client's last error message ("" if its last call succeeded)
 * into buf (NUL-terminated, truncated to size - 1 bytes); returns the
 * message's full length. Works on closed handles (returns the message
 * saying so). Thread-safe; buf may be NULL when size is 0. */
size_t zs_client_error(const zs_client* client, char* buf, size_t size);

/* ----------------------------------------------------------------- model */

typedef struct zs_tensor {
  const char* name;     /* unique, non-empty, UTF-8 */
  const int64_t* shape; /* ndim dimensions, each >= 1 (row-major) */
  size_t ndim;          /* >= 1 */
  uint32_t param_group; /* index into zs_model.groups */
} zs_tensor;

/* AdamW hyperparameters of a group of tensors (torch's param groups). */
typedef struct zs_param_group {
  double beta1, beta2, eps, weight_decay;
  double lr_scale; /* multiplies the step's lr */
  /* 1: DeepSpeed's Adam "bias_correction": false (no 1 - beta^t terms);
   * 0 (the default): as torch.optim.AdamW. Since API 4. */
  int32_t no_bias_correction;
} zs_param_group;

typedef struct zs_model {
  const zs_tensor* tensors;
  size_t num_tensors;
  const zs_param_group* groups;
  size_t num_groups;
  uint32_t alignment;              /* server ranges start at multiples */
  uint32_t contributions_per_step; /* pushes covering each element/step */
  int serving_dtype;               /* ZS_DTYPE_BF16 or ZS_DTYPE_FP16 */
  /* Server-side initialisation normal(0, init_std) from init_seed; both 0:
   * parameters start at 0 (write them with zs_write_parameters or
   * zs_trainer_start). */
  uint64_t init_seed;
  double init_std;
} zs_model;

/* beta1 0.9, beta2 0.999, eps 1e-8, weight_decay 0, lr_scale 1,
 * no_bias_correction 0. */
void zs_param_group_init(zs_param_group* group);
/* No tensors or groups, alignment 64, 1 contribution per step, serving
 * dtype bf16, no seeded init. */
void zs_model_init(zs_model* model);

/* Registers the model (job id from zs_connect) on every server and checks
 * that all computed the same partition plan. Idempotent: the same model
 * again is accepted; a different one is FAILED_PRECONDITION or
 * ALREADY_EXISTS from the servers. Waits for the client's calls in flight.
 * INVALID_ARGUMENT names the bad field (e.g. "tensor 'l1.w' has dimension 0
 * (must be >= 1)", "model.alignment 0 is not in [1, 1048576]"). */
int zs_register(zs_client* client, const zs_model* model);
/* Uses the model already registered on the servers (no spec needed): for
 * admin tools and late joiners. FAILED_PRECONDITION when none is. */
int zs_attach(zs_client* client);

/* Layout queries (after zs_register or zs_attach; else
 * FAILED_PRECONDITION). Thread-safe; outputs untouched on error. */
int zs_num_servers(zs_client* client, uint32_t* num_servers);
int zs_model_size(zs_client* client, uint64_t* total_elements);
/* The flat range of the tensor named `name` (NOT_FOUND if none). */
int zs_tensor_range(zs_client* client, const char* name, uint64_t* offset,
                    uint64_t* count);
/* The range server `server` owns (OUT_OF_RANGE past the last). */
int zs_server_range(zs_client* client, uint32_t server, uint64_t* offset,
                    uint64_t* count);
/* Part `index` of `parts` of the flat space, cut at the alignment the way
 * server ranges are: the slice a data-parallel rank may push (aligned). */
int zs_slice(zs_client* client, uint32_t parts, uint32_t index,
             uint64_t* offset, uint64_t* count);

/* ------------------------------------------------------------- data plane */

/* Thread-safe: concurrent writes, pushes and gathers run in parallel. The
 * caller's buffer is borrowed for the call only. */

/* Writes fp32 master weights of [offset, offset + count) from `data`
 * (data_bytes must be 4 * count). Allowed while no gradient is pending for
 * the current step. OUT_OF_RANGE outside the model. */
int zs_write_parameters(zs_client* client, uint64_t offset, uint64_t count,
                        const float* data, size_t data_bytes);

/* Identifies one gradient contribution; a retried push with the same key
 * is applied once. */
typedef struct zs_push_id {
  uint64_t epoch; /* the trainer's (zs_outcome.epoch) */
  uint64_t step;  /* the step being made (zs_outcome.state.step) */
  uint32_t slot;  /* 0 .. contributions_per_step - 1 */
  /* Unique per worker and bucket within a step (may repeat across steps);
   * the server keys a piece "<key_prefix>/<offset>". <= 200 bytes of
   * UTF-8. */
  const char* key_prefix;
} zs_push_id;

/* Pushes the gradient of [offset, offset + count): count elements of
 * `dtype` at `data` (data_bytes = count * 4 or 2). The range must start and
 * end at multiples of the model's alignment (or at its end). The buffer is
 * read during the call only. */
int zs_push(zs_client* client, uint64_t offset, uint64_t count, int dtype,
            const void* data, size_t data_bytes, const zs_push_id* id);

/* Gathers the parameters of [offset, offset + count) as `dtype` into `out`
 * (out_bytes = count * 4 or 2): fp32 is the master copy, bf16/fp16 the
 * serving copy. *step (may be NULL) receives the committed steps the data
 * reflects (equal on every server). count 0 makes no RPC and leaves *step
 * untouched. */
int zs_gather(zs_client* client, uint64_t offset, uint64_t count, int dtype,
              void* out, size_t out_bytes, uint64_t* step);

/* ---------------------------------------------------------- admin, state */

/* What a job's workers need besides the servers' state to continue exactly
 * where they were (recorded with every checkpoint and commit). */
typedef struct zs_trainer_state {
  uint64_t step;    /* optimizer steps done (the servers' step) */
  uint64_t updates; /* steps applied (skipped ones not counted) */
  int64_t data_epoch, data_shard, data_offset; /* the loader's position */
  uint64_t seed;
  double loss_scale; /* 1 without fp16 */
  int64_t loss_scale_hysteresis, loss_scale_iteration, loss_scale_last_overflow;
} zs_trainer_state;

/* One server's figures (GetStats). */
typedef struct zs_server_stats {
  uint32_t shard_index, num_shards;
  uint64_t step, optimizer_steps, epoch;
  uint64_t owned_offset, owned_count; /* its flat range */
  uint64_t bytes_held, bytes_held_rss;
  uint64_t contributions_applied, duplicates_ignored, requests_rejected;
  uint64_t bytes_pushed, bytes_gathered;
  double last_step_seconds, optimizer_elements_per_second;
  uint64_t incarnation; /* changes when the server restarts */
  uint64_t restored_step, checkpoints_written;
  uint64_t checkpoint_steps[16];  /* complete checkpoints, newest first */
  uint32_t num_checkpoint_steps;  /* in the list (at most 16) */
  int awaiting_restore;           /* restarted: refuses pushes until restore */
  char storage[8];                /* "ram" or "nvme" */
  zs_trainer_state trainer_state; /* recorded with its last commit */
} zs_server_stats;

/* Every server's stats in shard order into out[0..capacity); *count
 * receives the number of servers. OUT_OF_RANGE (nothing written but
 * *count) when capacity is below it. Needs no registered model (the owned
 * range is 0, 0 before one is). */
int zs_stats(zs_client* client, zs_server_stats* out, size_t capacity,
             size_t* count);
/* Checkpoints committed step `step` on every server with `state` (NULL:
 * the state the servers kept from the last commit) and an optional tag
 * (NULL or UTF-8).
 * Servers need --checkpoint_dir. After zs_register or zs_attach. */
int zs_checkpoint(zs_client* client, uint64_t step,
                  const zs_trainer_state* state, const char* tag);
/* Restores checkpoint `step` (0: the newest complete one) on every server
 * with epoch `epoch`; *state (may be NULL) receives the workers' state
 * recorded in it. After zs_register or zs_attach. */
int zs_restore(zs_client* client, uint64_t step, uint64_t epoch,
               zs_trainer_state* state);

/* ------------------------------------------------ trainer (step protocol) */

/* The step protocol of client/step_protocol.h over a client and a group.
 * Threading: one call at a time per trainer (another thread's concurrent
 * call, or one from its own callback, returns ZS_FAILED_PRECONDITION);
 * start, step, decide, commit and after_fetch are collective over the
 * group. Order: start -> after_fetch -> (step | decide -> commit) ->
 * after_fetch -> ...; a call out of order is ZS_FAILED_PRECONDITION naming
 * the call expected and changes nothing. */

/* The ranks of the job as the trainer sees them. Callbacks return 0 on
 * success (anything else fails the call with that code, or ZS_UNKNOWN)
 * and run on the thread that called the trainer; they must not call this
 * trainer. Rank 0 is the step leader. */
typedef int (*zs_broadcast_fn)(void* data, size_t bytes, void* user);
typedef int (*zs_all_gather_fn)(const void* mine, size_t bytes, void* all,
                                void* user);
typedef struct zs_group {
  int rank; /* 0 .. size - 1 */
  int size; /* >= 1 */
  /* The `bytes` at `data` become rank 0's on every rank. */
  zs_broadcast_fn broadcast;
  /* Every rank's `bytes` at `mine`, in rank order, into `all`
   * (size * bytes). */
  zs_all_gather_fn all_gather;
  void* user; /* passed to both */
} zs_group;

typedef struct zs_trainer_options {
  /* Checkpoint every this many steps and recover from server failures
   * (roll back); 0: off, every failure is an error. */
  int checkpoint_interval;
  double recovery_timeout_seconds; /* how long to wait for a server */
  int elastic;        /* a start may continue from the servers' last step */
  uint64_t min_epoch; /* the previous group's epoch (elastic) */
  /* Elastic: the membership whose epoch the leader reports in every
   * outcome (zs_outcome.world_epoch); may be NULL. Borrowed: looked up at
   * each use, so closing it only stops the reports. */
  zs_member* member;
} zs_trainer_options;

/* checkpoint_interval 0, recovery_timeout 60 s, not elastic. */
void zs_trainer_options_init(zs_trainer_options* options);

/* What a collective call ended in. */
enum {
  ZS_OUTCOME_OK = 0,          /* go on (a fresh start, a step made) */
  ZS_OUTCOME_ROLLED_BACK = 1, /* every rank moves to `state` and fetches */
  ZS_OUTCOME_CONTINUED = 2,   /* elastic start from the servers' last step */
  ZS_OUTCOME_RETRY = 3        /* a failed fetch with healthy servers */
};
typedef struct zs_outcome {
  int kind;               /* ZS_OUTCOME_* */
  uint64_t epoch;         /* of the pushes to make now (zs_push_id) */
  uint64_t world_epoch;   /* elastic: the leader's membership epoch */
  zs_trainer_state state; /* the workers' state now: state.step is the
                             step to push for next */
} zs_outcome;

/* The leader's decision for a step, the same on every rank. */
typedef struct zs_decision {
  double grad_norm; /* global norm of the unscaled gradients */
  float clip_coef;  /* torch 1.13's clamped clip coefficient (1: none) */
  float grad_scale; /* what the servers multiply by: clip / loss scale */
  int skipped;      /* non-finite gradients: no update */
} zs_decision;

typedef struct zs_step_args {
  uint64_t step;   /* must be the trainer's (zs_outcome.state.step) */
  int push_status; /* this rank's pushes: ZS_OK or the code one returned */
  /* 1: the norm comes from the servers' prepare (needed when servers sum
   * several contributions); 0: from the ranks' sum_squares. */
  int norm_from_servers;
  /* This rank's fp64 sum of squares of the (loss-scaled) gradient elements
   * it owns, and whether it saw a NaN/Inf; added over ranks in rank order.
   */
  double sum_squares;
  int nonfinite;
  double loss_scale; /* the scale the pushed gradients carry (1: none) */
  double max_norm;   /* clip the global norm to this; 0: off */
  double lr;         /* this step's learning rate (times lr_scale) */
} zs_step_args;

/* A trainer over `client` for this rank of `group` (NULL: a single rank;
 * copied). The client handle may be closed before the trainer. Close with
 * zs_trainer_close. */
int zs_trainer_create(zs_client* client, const zs_group* group,
                      const zs_trainer_options* options, zs_trainer** out);
int zs_trainer_close(zs_trainer* trainer);
size_t zs_trainer_error(const zs_trainer* trainer, char* buf, size_t size);

/* Called on the leader of a fresh job to write the initial parameters
 * (e.g. zs_write_parameters on the trainer's client); returns ZS_OK or an
 * error code. */
typedef int (*zs_write_initial_fn)(void* user);

/* Starts the job (collective; after zs_register of the model on the
 * trainer's client). A fresh job's leader writes the initial parameters:
 * the whole model from `initial` (initial_bytes = 4 * total elements), or
 * through `write_initial`, or neither (seeded init or zeros; initial_bytes
 * must then be 0: a NULL `initial` with a size is INVALID_ARGUMENT); with
 * checkpoints on it checkpoints step 0 with `now` (NULL: zeros, loss scale
 * 1; now->step and updates must be 0). With checkpoints on, a job finding
 * servers at a later step resumes or rolls back there (ZS_OUTCOME_
 * ROLLED_BACK), or continues (elastic: ZS_OUTCOME_CONTINUED). Then every
 * rank fetches the parameters and calls zs_trainer_after_fetch. */
int zs_trainer_start(zs_trainer* trainer, const float* initial,
                     size_t initial_bytes, zs_write_initial_fn write_initial,
                     void* user, const zs_trainer_state* now, zs_outcome* out);

/* One step, after this rank's pushes for it (collective): the decision
 * (from the servers' prepare or the ranks' sums of squares: global norm,
 * clip, skip on NaN/Inf), then the leader's commit with args->lr and
 * checkpoint every checkpoint_interval steps. `after` (NULL: the current
 * state) gives the workers' state after the step; the trainer sets its
 * step (+1) and updates (+1 unless skipped). *decision (may be NULL)
 * receives the decision. ZS_OUTCOME_OK or ROLLED_BACK (a server failed:
 * move to out->state and redo from there); either way every rank fetches
 * the parameters next and calls zs_trainer_after_fetch. Before any push of
 * a single-rank job: FAILED_PRECONDITION. An error from the servers or the
 * group leaves the trainer failed: close it (a new trainer resumes). */
int zs_trainer_step(zs_trainer* trainer, const zs_step_args* args,
                    const zs_trainer_state* after, zs_decision* decision,
                    zs_outcome* out);
/* zs_trainer_step in two calls, for state that depends on the decision (a
 * dynamic loss scaler): decide (ZS_OUTCOME_OK: *decision is valid; or
 * ROLLED_BACK), then commit with the state after the step. */
int zs_trainer_decide(zs_trainer* trainer, const zs_step_args* args,
                      zs_decision* decision, zs_outcome* out);
int zs_trainer_commit(zs_trainer* trainer, const zs_trainer_state* after,
                      zs_outcome* out);
/* After this rank's parameter fetch ended with `fetch_status` (ZS_OK or the
 * code zs_gather returned), collective: ZS_OUTCOME_OK (the next step may
 * begin), ROLLED_BACK (fetch again, from out->state) or RETRY (the servers
 * are healthy: fetch again). */
int zs_trainer_after_fetch(zs_trainer* trainer, int fetch_status,
                           zs_outcome* out);

/* ------------------------------------------------------------ membership */

/* A worker's membership of the job (MembershipService on shard 0). Every
 * function is thread-safe; calls have a deadline of rpc_timeout_seconds. */

typedef struct zs_member_options {
  /* Printable ASCII (the server's rule; bytes that are not UTF-8 are
   * refused by zs_member_create, the rest by the server at join). */
  const char* worker_name; /* stable, e.g. host:pid or the pod name */
  const char* node;        /* host identity (may be NULL) */
  const char* address;     /* where peers reach this worker (may be NULL) */
  uint32_t local_rank, local_size;
  double rpc_timeout_seconds;
} zs_member_options;

typedef struct zs_member_info {
  uint64_t member_id;
  uint32_t rank; /* dense rank in the epoch */
  uint32_t local_rank, local_size;
  char worker_name[256]; /* NUL-terminated; longer names are cut */
  char node[256];
  char address[256];
} zs_member_info;

typedef struct zs_world {
  uint64_t epoch;     /* increases on every join and leave */
  uint64_t step;      /* the job's committed steps */
  uint64_t member_id; /* this member's; 0 when not a member */
  int expired;        /* the lease ran out: join again */
  size_t num_members;
} zs_world;

/* local_rank 0, local_size 1, rpc timeout 10 s, every string NULL. */
void zs_member_options_init(zs_member_options* options);
/* This worker's membership of the client's job (shard 0 hosts it). No RPC.
 * Close with zs_member_close (which does not leave: the lease expires). */
int zs_member_create(zs_client* client, const zs_member_options* options,
                     zs_member** out);
int zs_member_close(zs_member* member);
size_t zs_member_error(const zs_member* member, char* buf, size_t size);
/* Joins (a new member id into *member_id, may be NULL) and starts the
 * lease keeper, a thread heartbeating every lease/3. */
int zs_member_join(zs_member* member, uint64_t* member_id);
/* One heartbeat now (FAILED_PRECONDITION when not a member; NOT_FOUND when
 * the lease expired). */
int zs_member_heartbeat(zs_member* member);
/* Leaves now (the epoch moves at once); leaving twice is OK. */
int zs_member_leave(zs_member* member);
/* The newest view seen: *world, and its members in rank order into
 * members[0..capacity) (may be NULL with capacity 0 to ask the count; NULL
 * with a capacity is INVALID_ARGUMENT, nothing written). OUT_OF_RANGE (only
 * *world written) when capacity is too small. */
int zs_member_world(zs_member* member, zs_world* world, zs_member_info* members,
                    size_t capacity);

/* --------------------------------------------------------- configuration */

/* A DeepSpeed JSON config resolved by the C++ engine's own parser
 * (worker/config/ds_config.h: DeepSpeed's defaults and rules, batch sizes
 * derived, errors and warnings naming the key's full path), the learning
 * rate of its schedule and its fp16 loss scaler: a binding asks the library
 * instead of re-implementing them, so it gets the engine's numbers bit for
 * bit. No server is involved; every function is thread-safe. */

enum { ZS_PRECISION_FP32 = 0, ZS_PRECISION_FP16 = 1, ZS_PRECISION_BF16 = 2 };
/* scheduler.type: none (optimizer lr throughout), WarmupLR, WarmupDecayLR,
 * WarmupCosineLR. */
enum {
  ZS_LR_CONSTANT = 0,
  ZS_LR_WARMUP = 1,
  ZS_LR_WARMUP_DECAY = 2,
  ZS_LR_WARMUP_COSINE = 3
};

/* A resolved config; the keys' meanings are DeepSpeed's. Flags are 0 or 1.
 * The functions taking one check every field first (INVALID_ARGUMENT
 * naming the first out of range, e.g. "config.lr_schedule must be in [0,
 * 3], got 7"; nothing written), so a binding may change fields between
 * calls. */
typedef struct zs_train_config {
  /* train = micro * accumulation * world_size, each >= 1 */
  int64_t train_batch_size, micro_batch_per_worker, gradient_accumulation_steps;
  int32_t world_size;
  double gradient_clipping; /* max global L2 norm; 0: off */
  char optimizer_type[16];  /* as written: "Adam" / "AdamW" (any case) */
  double lr, beta1, beta2, eps, weight_decay; /* optimizer.params */
  int32_t lr_schedule;                        /* ZS_LR_* */
  /* The schedule's base rate (optimizer.params.lr as parsed): the constant
   * rate, or what WarmupCosineLR's ratio scales. */
  double schedule_lr, warmup_min_lr, warmup_max_lr; /* Warmup(Decay)LR */
  int64_t warmup_num_steps;               /* < 2 acts as 2 (DeepSpeed) */
  int32_t warmup_linear;                  /* warmup_type: 0 "log", 1 "linear" */
  int64_t total_num_steps;                /* WarmupDecayLR, WarmupCosineLR */
  double warmup_min_ratio, cos_min_ratio; /* WarmupCosineLR */
  int32_t precision;                      /* ZS_PRECISION_* */
  /* fp16's loss scaler (the engine uses it only with ZS_PRECISION_FP16; the
   * other precisions carry the defaults below and scale by 1). */
  int32_t loss_scale_dynamic;     /* fp16.loss_scale 0 */
  double static_loss_scale;       /* fp16.loss_scale (0 when dynamic) */
  double initial_loss_scale;      /* 2^initial_scale_power (default 65536) */
  int64_t loss_scale_window;      /* >= 1 (default 1000) */
  int64_t hysteresis;             /* >= 1 (default 2) */
  int32_t consecutive_hysteresis; /* default 0 */
  double min_loss_scale;          /* > 0 (default 1) */
  /* zero_optimization */
  int32_t stage, overlap_comm, contiguous_gradients, reduce_scatter;
  int64_t reduce_bucket_size, allgather_bucket_size,
      stage3_prefetch_bucket_size, stage3_max_live_parameters,
      stage3_max_reuse_distance, stage3_param_persistence_threshold,
      sub_group_size;           /* elements */
  int32_t offload_param_server; /* offload_param.device "server" (or "cpu") */
  /* zeroshard */
  int32_t num_servers; /* addresses listed, the count given, or 0 (unset) */
  char servers[4096];  /* the addresses joined by ',' ("" if none) */
  int32_t server_aggregation;
  uint32_t alignment;          /* elements, >= 1 (default 64) */
  int32_t checkpoint_interval; /* steps; 0: no checkpoints */
  /* ZeRO-Offload's one-step delayed parameter update (stages 1-2, no
   * checkpoints, no server aggregation) from step
   * delayed_update_warmup_steps (>= 1, default 40) on; zeroshard-worker's
   * engine honours it, zeroshard.initialize refuses it (since API 3). */
  int32_t delayed_parameter_update;
  int64_t delayed_update_warmup_steps;
  /* optimizer.params.bias_correction false (since API 4) */
  int32_t no_bias_correction;
} zs_train_config;

/* Parses the DeepSpeed JSON config text `json` for world_size (>= 1)
 * data-parallel workers. The warnings (unknown or unused keys, DeepSpeed's
 * own), each followed by '\n', go into warnings[0..warnings_size)
 * (NUL-terminated, cut to fit; warnings may be NULL when warnings_size is 0)
 * and their full length into *warnings_length (may be NULL); they are
 * written also when the config is rejected. *out receives the config.
 * INVALID_ARGUMENT with the parser's message ("invalid JSON at line 3,
 * column 5: ...", "optimizer.type: must be Adam or AdamW ..."), *out
 * untouched; also when a config does not fit zs_train_config (addresses
 * over 4095 bytes joined, or holding a ','). */
int zs_config_parse(const char* json, int world_size, zs_train_config* out,
                    char* warnings, size_t warnings_size,
                    size_t* warnings_length);
/* The same for the file at `path`: messages and warnings begin with
 * "<path>: "; NOT_FOUND for a file that cannot be opened. */
int zs_config_parse_file(const char* path, int world_size, zs_train_config* out,
                         char* warnings, size_t warnings_size,
                         size_t* warnings_length);
/* Resolves a DeepSpeed config as zs_config_parse (json) or
 * zs_config_parse_file (path) do — exactly one of json and path non-NULL —
 * filling its "auto" values (as Hugging Face's Trainer writes them) from
 * `inputs`: flags in one string, as zeroshard train takes them, e.g.
 * "--learning_rate=3e-4 --precision=bf16 --per_device_train_batch_size=4
 * --steps=1000 --hidden_size=768" (NULL or "": none; the rules are
 * worker/config/auto_inputs.h's). report[0..report_size) receives a JSON
 * object (NUL-terminated, cut to fit; report may be NULL when report_size
 * is 0; its full length in *report_length, which may be NULL):
 *   {"warnings": ["..."], "resolved": [{"key": "optimizer.params.lr",
 *    "value": "0.0003", "source": "auto←--learning_rate"}, ...],
 *    "table": "<the same as an aligned text table>",
 *    "server_flags": ["--storage=nvme", ...]}
 * ("resolved", "table" and "server_flags" only on success). Errors as
 * zs_config_parse; an "auto" that nothing fills, or a bad input, is
 * INVALID_ARGUMENT naming the key or flag; *out untouched. */
int zs_config_resolve(const char* json, const char* path, int world_size,
                      const char* inputs, zs_train_config* out, char* report,
                      size_t report_size, size_t* report_length);
/* The engine's one-line description ("stage 3 (offload_param=server), bf16,
 * batch 32 = 4 x 4 x 2 workers, AdamW lr 0.0006 wd 0.1, WarmupCosineLR,
 * clip 1, 2 servers") into buf[0..size) (NUL-terminated, cut to fit; buf
 * may be NULL when size is 0); returns its full length. A NULL or invalid
 * config: "" and 0. */
size_t zs_config_describe(const zs_train_config* config, char* buf,
                          size_t size);
/* *lr receives the learning rate of update number `step` (0-based: the
 * updates applied so far; a step skipped for fp16 overflow does not count)
 * under the config's schedule, as the engine computes it: DeepSpeed's
 * scheduler value at iteration step - 1, as DeepSpeed's engine applies it
 * (the scheduler is made at iteration -1 and stepped after each update;
 * worker/engine/lr_schedule.h), bit for bit. A negative step:
 * INVALID_ARGUMENT. */
int zs_config_lr(const zs_train_config* config, int64_t step, double* lr);
/* The loss scaler of the config over four fields of *state: loss_scale,
 * loss_scale_hysteresis, loss_scale_iteration, loss_scale_last_overflow
 * (the rest of *state is not touched). They hold what the C++ engine
 * records in its trainer state: for a dynamic fp16 scaler its scale,
 * hysteresis left, iteration and last overflow iteration; otherwise (fp32,
 * bf16, a static fp16 scale) the scale (1, or fp16.loss_scale) and 0, 0, 0
 * — hysteresis 0 means "not recorded".
 * init: the scaler's initial state (dynamic: 2^initial_scale_power,
 * hysteresis, 0, -1).
 * update: after a step whose gradients overflowed (overflow != 0: the step
 * was skipped) or not, the scaler continues from *state (afresh when its
 * hysteresis is 0, as the engine does on resume), applies DeepSpeed's
 * update_scale and writes its state back: the state to record with the
 * step's commit and whose loss_scale scales the next step.
 * FAILED_PRECONDITION, *state untouched, for an overflow with the scale
 * already at min_loss_scale and the hysteresis spent (DeepSpeed raises
 * "Current loss scale already at minimum"); INVALID_ARGUMENT, untouched,
 * for a state no dynamic scaler of the config can be in (e.g. hysteresis
 * above the config's). */
int zs_loss_scaler_init(const zs_train_config* config, zs_trainer_state* state);
int zs_loss_scaler_update(const zs_train_config* config,
                          zs_trainer_state* state, int overflow);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ZEROSHARD_CLIENT_ZEROSHARD_H_ */
