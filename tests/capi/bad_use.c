/* Bad use of the C API (zeroshard.h), compiled as C99 against the
 * installed library: NULL, closed, invented and foreign handles, NULL
 * pointers, wrong lengths, ranges outside the model, malformed options and
 * models, calls out of order, a step before any push, a trainer called from
 * its own callback, a failing group callback, misused configuration
 * functions, an unreachable server, and a server killed under a live
 * client; strings the servers would refuse to parse (not UTF-8) and a
 * token with control characters (gRPC aborted the process on it). Every call must return the expected code with a message naming
 * the problem — and change nothing — never crash. Run under AddressSanitizer too (docs/c_api.md).
 *
 *   bad_use ADDRESS SERVER_PID
 *
 * ADDRESS: one live zeroshard-server (shard 0 of 1, --insecure) that
 * bad_use SIGKILLs (SERVER_PID) near the end. Prints a line per check;
 * exits 0 when all pass. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <zeroshard.h>

static int checks, failures;

/* rc must be `want` and the thread's message must contain `words` ("" for
 * ZS_OK); words NULL: a plain condition, the message is not looked at. */
static void expect(int line, const char* what, int rc, int want,
                   const char* words) {
  const char* msg = words == NULL ? "" : zs_last_error();
  int ok = rc == want &&
           (words == NULL ||
            (want == ZS_OK ? msg[0] == '\0' : strstr(msg, words) != NULL));
  ++checks;
  if (!ok) ++failures;
  printf("%s %s -> %s: %s", ok ? "ok  " : "FAIL", what, zs_status_name(rc),
         msg);
  if (!ok) {
    printf("   [line %d: wanted %s with \"%s\"]", line, zs_status_name(want),
           words != NULL ? words : "");
  }
  printf("\n");
}
#define EXPECT(call, want, words) expect(__LINE__, #call, (call), want, words)
#define TRUE(cond) \
  expect(__LINE__, #cond, (cond) ? ZS_OK : ZS_UNKNOWN, ZS_OK, NULL)

static zs_client* connect_to(const char* address, double deadline,
                             int attempts) {
  zs_connect_options o;
  zs_client* c = NULL;
  zs_connect_options_init(&o);
  o.addresses = address, o.job_id = "bad-use", o.insecure = 1;
  o.deadline_seconds = deadline, o.max_attempts = attempts;
  EXPECT(zs_connect(&o, &c), ZS_OK, "");
  return c;
}

static int64_t w_shape[2] = {4, 40}, b_shape[1] = {4};
static zs_tensor tensors[2];
static zs_param_group groups[1];

static zs_model good_model(void) {
  zs_model m;
  tensors[0].name = "w", tensors[0].shape = w_shape, tensors[0].ndim = 2;
  tensors[0].param_group = 0;
  tensors[1].name = "b", tensors[1].shape = b_shape, tensors[1].ndim = 1;
  tensors[1].param_group = 0;
  zs_param_group_init(&groups[0]);
  zs_model_init(&m);
  m.tensors = tensors, m.num_tensors = 2, m.groups = groups, m.num_groups = 1;
  return m;
}

static void versions_and_options(void) {
  zs_connect_options o;
  zs_client* c = NULL;
  char buf[8];
  TRUE(zs_api_version() == ZS_API_VERSION);
  TRUE(strcmp(zs_version(), ZS_VERSION) == 0);
  TRUE(strcmp(zs_status_name(ZS_OUT_OF_RANGE), "OUT_OF_RANGE") == 0);
  TRUE(strcmp(zs_status_name(99), "UNKNOWN_CODE") == 0);
  EXPECT(zs_connect(NULL, &c), ZS_INVALID_ARGUMENT, "options is NULL");
  zs_connect_options_init(&o);
  o.addresses = "127.0.0.1:1", o.insecure = 1;
  EXPECT(zs_connect(&o, NULL), ZS_INVALID_ARGUMENT, "out is NULL");
  o.addresses = NULL;
  EXPECT(zs_connect(&o, &c), ZS_INVALID_ARGUMENT, "addresses is empty");
  o.addresses = "127.0.0.1:1,,127.0.0.1:2";
  EXPECT(zs_connect(&o, &c), ZS_INVALID_ARGUMENT, "empty entry (shard 1)");
  o.addresses = "garbage"; /* gRPC would take port 443 */
  EXPECT(zs_connect(&o, &c), ZS_INVALID_ARGUMENT,
         "server address \"garbage\" has no port");
  o.addresses = "127.0.0.1:1", o.insecure = 0;
  EXPECT(zs_connect(&o, &c), ZS_INVALID_ARGUMENT, "give tls_ca_file");
  o.insecure = 1, o.tls_ca_file = "ca.pem";
  EXPECT(zs_connect(&o, &c), ZS_INVALID_ARGUMENT, "insecure = 1 excludes");
  o.insecure = 0, o.tls_ca_file = "/nonexistent/ca.pem";
  EXPECT(zs_connect(&o, &c), ZS_NOT_FOUND, "/nonexistent/ca.pem");
  o.insecure = 1, o.tls_ca_file = NULL;
  o.token = "0123456789abcdef0123", o.token_file = "/tmp/token";
  EXPECT(zs_connect(&o, &c), ZS_INVALID_ARGUMENT, "not both");
  o.token_file = NULL;
  /* A token goes into an HTTP/2 header: a control character in it made
   * gRPC abort the process; it is held to the token file's rule. */
  o.token = "0123456789abcdef\nX-Injected: 1";
  EXPECT(zs_connect(&o, &c), ZS_INVALID_ARGUMENT,
         "token has byte 16 outside printable ASCII");
  o.token = "0123456789abcdef\x01";
  EXPECT(zs_connect(&o, &c), ZS_INVALID_ARGUMENT, "token has byte 16");
  o.token = "short";
  EXPECT(zs_connect(&o, &c), ZS_INVALID_ARGUMENT,
         "token is 5 bytes; give at least 16");
  o.token = NULL, o.job_id = "job\xff"; /* not UTF-8: servers refuse it */
  EXPECT(zs_connect(&o, &c), ZS_INVALID_ARGUMENT,
         "options->job_id is not valid UTF-8 (byte 3)");
  o.job_id = "\xed\xa0\x80"; /* a surrogate */
  EXPECT(zs_connect(&o, &c), ZS_INVALID_ARGUMENT, "job_id is not valid UTF-8");
  o.job_id = NULL, o.deadline_seconds = -1;
  EXPECT(zs_connect(&o, &c), ZS_INVALID_ARGUMENT, "deadline_seconds");
  o.deadline_seconds = 5, o.max_attempts = 0;
  EXPECT(zs_connect(&o, &c), ZS_INVALID_ARGUMENT, "max_attempts");
  o.max_attempts = 3;
  setenv("ZEROSHARD_SHARED_MEMORY", "maybe", 1);
  EXPECT(zs_connect(&o, &c), ZS_INVALID_ARGUMENT, "ZEROSHARD_SHARED_MEMORY");
  unsetenv("ZEROSHARD_SHARED_MEMORY");
  TRUE(c == NULL); /* no failed connect wrote a handle */
  TRUE(zs_client_error(NULL, buf, sizeof buf) ==
       strlen("the client handle is NULL"));
  TRUE(strcmp(buf, "the cli") == 0); /* cut to the buffer, terminated */
}

static void null_and_invented_handles(void) {
  zs_client* bogus = (zs_client*)(uintptr_t)0x7fffdeadbeefULL;
  uint64_t u = 0;
  uint32_t n = 0;
  size_t count = 0;
  float f[4] = {0};
  zs_outcome out;
  zs_step_args a = {0};
  zs_world w;
  zs_push_id id = {0, 0, 0, "k"};
  zs_model m = good_model();
  EXPECT(zs_close(NULL), ZS_INVALID_ARGUMENT, "client handle is NULL");
  EXPECT(zs_register(NULL, &m), ZS_INVALID_ARGUMENT, "client handle is NULL");
  EXPECT(zs_attach(NULL), ZS_INVALID_ARGUMENT, "handle is NULL");
  EXPECT(zs_num_servers(NULL, &n), ZS_INVALID_ARGUMENT, "handle is NULL");
  EXPECT(zs_model_size(NULL, &u), ZS_INVALID_ARGUMENT, "handle is NULL");
  EXPECT(zs_tensor_range(NULL, "w", &u, &u), ZS_INVALID_ARGUMENT, "NULL");
  EXPECT(zs_server_range(NULL, 0, &u, &u), ZS_INVALID_ARGUMENT, "NULL");
  EXPECT(zs_slice(NULL, 1, 0, &u, &u), ZS_INVALID_ARGUMENT, "NULL");
  EXPECT(zs_write_parameters(NULL, 0, 4, f, sizeof f), ZS_INVALID_ARGUMENT,
         "client handle is NULL");
  EXPECT(zs_push(NULL, 0, 4, ZS_DTYPE_FP32, f, sizeof f, &id),
         ZS_INVALID_ARGUMENT, "client handle is NULL");
  EXPECT(zs_gather(NULL, 0, 4, ZS_DTYPE_FP32, f, sizeof f, NULL),
         ZS_INVALID_ARGUMENT, "client handle is NULL");
  EXPECT(zs_stats(NULL, NULL, 0, &count), ZS_INVALID_ARGUMENT, "NULL");
  EXPECT(zs_checkpoint(NULL, 0, NULL, NULL), ZS_INVALID_ARGUMENT, "NULL");
  EXPECT(zs_restore(NULL, 0, 1, NULL), ZS_INVALID_ARGUMENT, "NULL");
  EXPECT(zs_trainer_create(NULL, NULL, NULL, NULL), ZS_INVALID_ARGUMENT,
         "client handle is NULL");
  EXPECT(zs_trainer_close(NULL), ZS_INVALID_ARGUMENT, "trainer handle is NULL");
  EXPECT(zs_trainer_start(NULL, NULL, 0, NULL, NULL, NULL, &out),
         ZS_INVALID_ARGUMENT, "trainer handle is NULL");
  EXPECT(zs_trainer_step(NULL, &a, NULL, NULL, &out), ZS_INVALID_ARGUMENT,
         "trainer handle is NULL");
  EXPECT(zs_trainer_decide(NULL, &a, NULL, &out), ZS_INVALID_ARGUMENT, "NULL");
  EXPECT(zs_trainer_commit(NULL, NULL, &out), ZS_INVALID_ARGUMENT, "NULL");
  EXPECT(zs_trainer_after_fetch(NULL, 0, &out), ZS_INVALID_ARGUMENT, "NULL");
  EXPECT(zs_member_create(NULL, NULL, NULL), ZS_INVALID_ARGUMENT,
         "client handle is NULL");
  EXPECT(zs_member_close(NULL), ZS_INVALID_ARGUMENT, "member handle is NULL");
  EXPECT(zs_member_join(NULL, &u), ZS_INVALID_ARGUMENT, "member handle");
  EXPECT(zs_member_heartbeat(NULL), ZS_INVALID_ARGUMENT, "member handle");
  EXPECT(zs_member_leave(NULL), ZS_INVALID_ARGUMENT, "member handle");
  EXPECT(zs_member_world(NULL, &w, NULL, 0), ZS_INVALID_ARGUMENT, "member");
  EXPECT(zs_gather(bogus, 0, 4, ZS_DTYPE_FP32, f, sizeof f, NULL),
         ZS_INVALID_ARGUMENT, "not a zeroshard client handle");
  EXPECT(zs_close(bogus), ZS_INVALID_ARGUMENT, "not a zeroshard client");
}

/* Before register, bad models, wrong lengths, ranges outside the model. */
static void client_misuse(zs_client* c) {
  zs_model m = good_model(), bad;
  zs_push_id id = {0, 0, 0, "k"};
  int64_t zero_shape[1] = {0};
  zs_tensor dup[2];
  float p[164], q[164], f[4] = {1, 2, 3, 4};
  uint16_t h[164];
  uint64_t u = 0, off = 0, cnt = 0;
  size_t count = 0, i;
  zs_server_stats stats[1];
  EXPECT(zs_model_size(c, &u), ZS_FAILED_PRECONDITION, "zs_register");
  EXPECT(zs_gather(c, 0, 4, ZS_DTYPE_FP32, f, sizeof f, NULL),
         ZS_FAILED_PRECONDITION, "zs_register");
  EXPECT(zs_push(c, 0, 4, ZS_DTYPE_FP32, f, sizeof f, &id),
         ZS_FAILED_PRECONDITION, "zs_register");
  EXPECT(zs_write_parameters(c, 0, 4, f, sizeof f), ZS_FAILED_PRECONDITION,
         "zs_register");
  EXPECT(zs_checkpoint(c, 0, NULL, NULL), ZS_FAILED_PRECONDITION, "register");
  EXPECT(zs_register(c, NULL), ZS_INVALID_ARGUMENT, "model is NULL");
  bad = m, bad.num_tensors = 0;
  EXPECT(zs_register(c, &bad), ZS_INVALID_ARGUMENT, "num_tensors is 0");
  bad = m, bad.tensors = NULL;
  EXPECT(zs_register(c, &bad), ZS_INVALID_ARGUMENT, "model.tensors is NULL");
  memcpy(dup, tensors, sizeof dup);
  bad = m, bad.tensors = dup;
  dup[1].name = NULL;
  EXPECT(zs_register(c, &bad), ZS_INVALID_ARGUMENT, "tensors[1].name is NULL");
  dup[1].name = "b\x80";
  EXPECT(zs_register(c, &bad), ZS_INVALID_ARGUMENT,
         "model.tensors[1].name is not valid UTF-8 (byte 1)");
  dup[1].name = "w";
  EXPECT(zs_register(c, &bad), ZS_INVALID_ARGUMENT, "'w' appears twice");
  dup[1].name = "b", dup[1].ndim = 0;
  EXPECT(zs_register(c, &bad), ZS_INVALID_ARGUMENT, "ndim is 0");
  dup[1].ndim = 1, dup[1].shape = zero_shape;
  EXPECT(zs_register(c, &bad), ZS_INVALID_ARGUMENT, "dimension 0");
  dup[1].shape = b_shape, dup[1].param_group = 3;
  EXPECT(zs_register(c, &bad), ZS_INVALID_ARGUMENT,
         "model.tensors[1] ('b') names param_group 3 of 1");
  bad = m, bad.serving_dtype = ZS_DTYPE_FP32;
  EXPECT(zs_register(c, &bad), ZS_INVALID_ARGUMENT,
         "model.serving_dtype is 1; give ZS_DTYPE_BF16 (2) or ZS_DTYPE_FP16 (3)");
  bad = m, bad.alignment = 0;
  EXPECT(zs_register(c, &bad), ZS_INVALID_ARGUMENT,
         "zs_register: model.alignment 0 is not in [1, ");
  groups[0].beta1 = 1.5;
  EXPECT(zs_register(c, &m), ZS_INVALID_ARGUMENT, "beta1");
  groups[0].beta1 = 0.9;
  groups[0].no_bias_correction = 2;
  EXPECT(zs_register(c, &m), ZS_INVALID_ARGUMENT, "no_bias_correction is 2");
  groups[0].no_bias_correction = 0;
  EXPECT(zs_model_size(c, &u), ZS_FAILED_PRECONDITION, "zs_register");

  EXPECT(zs_register(c, &m), ZS_OK, "");
  EXPECT(zs_register(c, &m), ZS_OK, ""); /* idempotent */
  EXPECT(zs_model_size(c, &u), ZS_OK, "");
  TRUE(u == 164);
  w_shape[1] = 41;
  EXPECT(zs_register(c, &m), ZS_FAILED_PRECONDITION, "another model");
  w_shape[1] = 40;
  EXPECT(zs_tensor_range(c, "b", &off, &cnt), ZS_OK, "");
  TRUE(off == 160 && cnt == 4);
  EXPECT(zs_tensor_range(c, "nope", &off, &cnt), ZS_NOT_FOUND, "nope");
  EXPECT(zs_tensor_range(c, NULL, &off, &cnt), ZS_INVALID_ARGUMENT, "name");
  EXPECT(zs_server_range(c, 1, &off, &cnt), ZS_OUT_OF_RANGE, "server 1 of 1");
  EXPECT(zs_slice(c, 0, 0, &off, &cnt), ZS_INVALID_ARGUMENT, "parts >= 1");

  for (i = 0; i < 164; ++i) p[i] = (float)i;
  EXPECT(zs_write_parameters(c, 0, 164, p, sizeof p), ZS_OK, "");
  EXPECT(zs_write_parameters(c, 0, 164, p, sizeof p - 4), ZS_INVALID_ARGUMENT,
         "data holds 652 bytes, but 164 elements of 4 bytes need 656");
  EXPECT(zs_write_parameters(c, 0, 164, NULL, sizeof p), ZS_INVALID_ARGUMENT,
         "data is NULL");
  EXPECT(zs_write_parameters(c, 100, 100, p, 400), ZS_OUT_OF_RANGE,
         "outside the model's 164 elements");
  EXPECT(zs_gather(c, UINT64_MAX, 2, ZS_DTYPE_FP32, f, 8, NULL),
         ZS_OUT_OF_RANGE, "outside the model");
  EXPECT(zs_gather(c, 0, 164, ZS_DTYPE_BF16, h, sizeof p, NULL),
         ZS_INVALID_ARGUMENT, "out holds 656 bytes, but 164 elements of 2");
  EXPECT(zs_gather(c, 0, 164, 7, h, sizeof h, NULL), ZS_INVALID_ARGUMENT,
         "dtype 7");
  EXPECT(zs_push(c, 1, 63, ZS_DTYPE_FP32, p, 63 * 4, &id), ZS_INVALID_ARGUMENT,
         "multiples of the alignment 64");
  EXPECT(zs_push(c, 0, 164, ZS_DTYPE_FP32, p, sizeof p, NULL),
         ZS_INVALID_ARGUMENT, "id is NULL");
  id.key_prefix = NULL;
  EXPECT(zs_push(c, 0, 164, ZS_DTYPE_FP32, p, sizeof p, &id),
         ZS_INVALID_ARGUMENT, "id->key_prefix is NULL");
  id.key_prefix = "";
  EXPECT(zs_push(c, 0, 164, ZS_DTYPE_FP32, p, sizeof p, &id),
         ZS_INVALID_ARGUMENT, "id->key_prefix is empty");
  id.key_prefix = "k\xc3"; /* cut UTF-8 */
  EXPECT(zs_push(c, 0, 164, ZS_DTYPE_FP32, p, sizeof p, &id),
         ZS_INVALID_ARGUMENT, "id->key_prefix is not valid UTF-8 (byte 1)");
  EXPECT(zs_checkpoint(c, 0, NULL, "tag\xff"), ZS_INVALID_ARGUMENT,
         "tag is not valid UTF-8 (byte 3)");
  id.key_prefix = "k", id.step = 5; /* the servers are at step 0 */
  EXPECT(zs_push(c, 0, 164, ZS_DTYPE_FP32, p, sizeof p, &id),
         ZS_FAILED_PRECONDITION, "future step 5");
  EXPECT(zs_stats(c, stats, 0, &count), ZS_OUT_OF_RANGE, "room for 0");
  TRUE(count == 1);
  EXPECT(zs_stats(c, stats, 1, &count), ZS_OK, "");
  TRUE(stats[0].owned_offset == 0 && stats[0].owned_count == 164);
  /* None of the rejected calls changed the parameters. */
  EXPECT(zs_gather(c, 0, 164, ZS_DTYPE_FP32, q, sizeof q, &u), ZS_OK, "");
  TRUE(memcmp(p, q, sizeof p) == 0 && u == 0);
}

static zs_trainer* current;
static zs_client* callback_client;
static int reentrant_rc = -1;
static char reentrant_msg[256];

/* write_initial: calls its own trainer (refused: busy), then writes. */
static int write_initial(void* user) {
  zs_outcome out;
  zs_step_args a;
  memset(&a, 0, sizeof a);
  reentrant_rc = zs_trainer_step(current, &a, NULL, NULL, &out);
  strncpy(reentrant_msg, zs_last_error(), sizeof reentrant_msg - 1);
  return zs_write_parameters(callback_client, 0, 164, user, 164 * 4);
}

static int failing_broadcast(void* data, size_t bytes, void* user) {
  (void)data, (void)bytes, (void)user;
  return ZS_UNAVAILABLE;
}

static int failing_all_gather(const void* mine, size_t bytes, void* all,
                              void* user) {
  (void)mine, (void)bytes, (void)all, (void)user;
  return ZS_UNAVAILABLE;
}

/* Returns a trainer that made step 0 and is ready for step 1. */
static zs_trainer* trainer_misuse(zs_client* c) {
  zs_trainer_options o;
  zs_trainer *t = NULL, *t2 = NULL;
  zs_group g = {0, 0, NULL, NULL, NULL};
  zs_outcome out;
  zs_step_args a;
  zs_decision d;
  zs_trainer_state now;
  zs_push_id id;
  float p[164], q[164], grad[164];
  char buf[64];
  int i;
  memset(&a, 0, sizeof a);
  memset(&now, 0, sizeof now);
  zs_trainer_options_init(&o);
  EXPECT(zs_trainer_create(c, &g, &o, &t), ZS_INVALID_ARGUMENT,
         "group->size is 0");
  g.size = 2, g.rank = 2;
  EXPECT(zs_trainer_create(c, &g, &o, &t), ZS_INVALID_ARGUMENT,
         "group->rank is 2 of 2");
  g.rank = 0;
  EXPECT(zs_trainer_create(c, &g, &o, &t), ZS_INVALID_ARGUMENT,
         "needs broadcast and all_gather");
  EXPECT(zs_trainer_create(c, NULL, NULL, &t), ZS_INVALID_ARGUMENT,
         "options is NULL");
  o.checkpoint_interval = -1;
  EXPECT(zs_trainer_create(c, NULL, &o, &t), ZS_INVALID_ARGUMENT,
         "checkpoint_interval is -1");
  o.checkpoint_interval = 0, o.recovery_timeout_seconds = 0;
  EXPECT(zs_trainer_create(c, NULL, &o, &t), ZS_INVALID_ARGUMENT,
         "recovery_timeout_seconds");
  o.recovery_timeout_seconds = 60;
  o.member = (zs_member*)(uintptr_t)0x7fff0000beefULL;
  EXPECT(zs_trainer_create(c, NULL, &o, &t), ZS_INVALID_ARGUMENT,
         "not a zeroshard member handle");
  o.member = NULL;
  TRUE(t == NULL);
  EXPECT(zs_trainer_create(c, NULL, &o, &t), ZS_OK, "");
  EXPECT(zs_trainer_step(t, &a, NULL, &d, &out), ZS_FAILED_PRECONDITION,
         "zs_trainer_start first");
  EXPECT(zs_trainer_after_fetch(t, ZS_OK, &out), ZS_FAILED_PRECONDITION,
         "zs_trainer_start first");
  for (i = 0; i < 164; ++i) p[i] = 0.01f * (float)i;
  EXPECT(zs_trainer_start(t, p, sizeof p - 4, NULL, NULL, NULL, &out),
         ZS_INVALID_ARGUMENT, "initial holds 652 bytes");
  EXPECT(zs_trainer_start(t, p, sizeof p, write_initial, p, NULL, &out),
         ZS_INVALID_ARGUMENT, "not both");
  /* A forgotten buffer is not a start from zeros. */
  EXPECT(zs_trainer_start(t, NULL, sizeof p, NULL, NULL, NULL, &out),
         ZS_INVALID_ARGUMENT, "initial is NULL with initial_bytes 656");
  now.step = 3;
  EXPECT(zs_trainer_start(t, NULL, 0, NULL, NULL, &now, &out),
         ZS_INVALID_ARGUMENT, "a fresh start is at step 0");
  EXPECT(zs_trainer_start(t, NULL, 0, NULL, NULL, NULL, NULL),
         ZS_INVALID_ARGUMENT, "out is NULL");
  current = t, callback_client = c;
  EXPECT(zs_trainer_start(t, NULL, 0, write_initial, p, NULL, &out), ZS_OK, "");
  TRUE(reentrant_rc == ZS_FAILED_PRECONDITION &&
       strstr(reentrant_msg, "another call on this trainer") != NULL);
  TRUE(out.kind == ZS_OUTCOME_OK && out.state.step == 0 &&
       out.state.loss_scale == 1);
  EXPECT(zs_trainer_start(t, NULL, 0, NULL, NULL, NULL, &out),
         ZS_FAILED_PRECONDITION, "fetch the parameters of step 0");
  a.loss_scale = 1, a.max_norm = 1, a.lr = 0.01;
  EXPECT(zs_trainer_step(t, &a, NULL, &d, &out), ZS_FAILED_PRECONDITION,
         "zs_trainer_after_fetch first");
  EXPECT(zs_trainer_after_fetch(t, 99, &out), ZS_INVALID_ARGUMENT,
         "fetch_status 99 is not a status code");
  EXPECT(zs_gather(c, 0, 164, ZS_DTYPE_FP32, q, sizeof q, NULL), ZS_OK, "");
  TRUE(memcmp(p, q, sizeof p) == 0); /* written by the callback */
  EXPECT(zs_trainer_after_fetch(t, ZS_OK, &out), ZS_OK, "");
  EXPECT(zs_trainer_commit(t, NULL, &out), ZS_FAILED_PRECONDITION,
         "zs_trainer_decide first");
  EXPECT(zs_trainer_step(t, NULL, NULL, &d, &out), ZS_INVALID_ARGUMENT,
         "args is NULL");
  a.step = 5;
  EXPECT(zs_trainer_step(t, &a, NULL, &d, &out), ZS_INVALID_ARGUMENT,
         "args->step is 5 but the trainer is at step 0");
  a.step = 0, a.loss_scale = 0;
  EXPECT(zs_trainer_step(t, &a, NULL, &d, &out), ZS_INVALID_ARGUMENT,
         "args->loss_scale is 0");
  a.loss_scale = 1, a.max_norm = -1;
  EXPECT(zs_trainer_step(t, &a, NULL, &d, &out), ZS_INVALID_ARGUMENT,
         "args->max_norm is -1");
  a.max_norm = 1, a.lr = -1;
  EXPECT(zs_trainer_step(t, &a, NULL, &d, &out), ZS_INVALID_ARGUMENT,
         "args->lr is -1");
  a.lr = 0.01, a.push_status = 17;
  EXPECT(zs_trainer_step(t, &a, NULL, &d, &out), ZS_INVALID_ARGUMENT,
         "push_status 17");
  a.push_status = ZS_OK;
  EXPECT(zs_trainer_step(t, &a, NULL, &d, &out), ZS_FAILED_PRECONDITION,
         "nothing was pushed for step 0");
  /* Refused without harm: push, and the same trainer makes the step. */
  for (i = 0; i < 164; ++i) {
    grad[i] = 0.001f * (float)(i % 7);
    a.sum_squares += (double)grad[i] * grad[i];
  }
  id.epoch = out.epoch, id.step = 0, id.slot = 0, id.key_prefix = "bad-use";
  EXPECT(zs_push(c, 0, 164, ZS_DTYPE_FP32, grad, sizeof grad, &id), ZS_OK, "");
  EXPECT(zs_trainer_decide(t, &a, &d, &out), ZS_OK, "");
  EXPECT(zs_trainer_decide(t, &a, &d, &out), ZS_FAILED_PRECONDITION,
         "step 0 is decided: call zs_trainer_commit first");
  EXPECT(zs_trainer_commit(t, NULL, &out), ZS_OK, "");
  TRUE(out.kind == ZS_OUTCOME_OK && out.state.step == 1 &&
       out.state.updates == 1 && d.skipped == 0 && d.grad_norm > 0);
  EXPECT(zs_trainer_after_fetch(
             t, zs_gather(c, 0, 164, ZS_DTYPE_FP32, q, sizeof q, NULL), &out),
         ZS_OK, "");
  TRUE(memcmp(p, q, sizeof p) != 0); /* the step moved the parameters */

  /* A handle of another kind; a closed trainer. */
  EXPECT(zs_trainer_create(c, NULL, &o, &t2), ZS_OK, "");
  EXPECT(zs_gather((zs_client*)t2, 0, 4, ZS_DTYPE_FP32, q, 16, NULL),
         ZS_INVALID_ARGUMENT, "the handle is a trainer, not a client");
  EXPECT(zs_trainer_close(t2), ZS_OK, "");
  EXPECT(zs_trainer_close(t2), ZS_INVALID_ARGUMENT,
         "the trainer handle was closed");
  EXPECT(zs_trainer_after_fetch(t2, ZS_OK, &out), ZS_INVALID_ARGUMENT,
         "the trainer handle was closed");
  zs_trainer_error(t2, buf, sizeof buf);
  TRUE(strcmp(buf, "the trainer handle was closed") == 0);

  /* A group whose callbacks fail: the start fails, the trainer says so. */
  g.rank = 0, g.size = 2;
  g.broadcast = failing_broadcast, g.all_gather = failing_all_gather;
  EXPECT(zs_trainer_create(c, &g, &o, &t2), ZS_OK, "");
  EXPECT(zs_trainer_start(t2, NULL, 0, NULL, NULL, NULL, &out), ZS_UNAVAILABLE,
         "the group's all_gather callback returned 14");
  EXPECT(zs_trainer_after_fetch(t2, ZS_OK, &out), ZS_FAILED_PRECONDITION,
         "the trainer failed earlier");
  zs_trainer_error(t2, buf, sizeof buf);
  TRUE(strstr(buf, "zs_trainer_after_fetch: the trainer failed") == buf);
  EXPECT(zs_trainer_close(t2), ZS_OK, "");
  return t;
}

static void members(zs_client* c) {
  zs_member_options o;
  zs_member* m = NULL;
  zs_world w;
  zs_member_info info[4];
  uint64_t id = 0;
  zs_member_options_init(&o);
  EXPECT(zs_member_create(c, NULL, &m), ZS_INVALID_ARGUMENT, "options is NULL");
  EXPECT(zs_member_create(c, &o, &m), ZS_INVALID_ARGUMENT,
         "worker_name is empty");
  o.worker_name = "bad-use", o.local_rank = 1;
  EXPECT(zs_member_create(c, &o, &m), ZS_INVALID_ARGUMENT,
         "local_rank 1 of local_size 1");
  o.worker_name = "bad-use\xff";
  EXPECT(zs_member_create(c, &o, &m), ZS_INVALID_ARGUMENT,
         "options->worker_name is not valid UTF-8 (byte 7)");
  o.worker_name = "bad-use", o.node = "\xc0\xaf"; /* overlong '/' */
  EXPECT(zs_member_create(c, &o, &m), ZS_INVALID_ARGUMENT,
         "options->node is not valid UTF-8 (byte 0)");
  o.node = "node-1";
  o.local_rank = 0, o.rpc_timeout_seconds = 0;
  EXPECT(zs_member_create(c, &o, &m), ZS_INVALID_ARGUMENT,
         "rpc_timeout_seconds");
  o.rpc_timeout_seconds = 5;
  EXPECT(zs_member_create(c, &o, &m), ZS_OK, "");
  EXPECT(zs_member_heartbeat(m), ZS_FAILED_PRECONDITION, "Join first");
  EXPECT(zs_member_world(m, NULL, NULL, 0), ZS_INVALID_ARGUMENT,
         "world is NULL");
  EXPECT(zs_member_join(m, &id), ZS_OK, "");
  EXPECT(zs_member_heartbeat(m), ZS_OK, "");
  EXPECT(zs_member_world(m, &w, NULL, 0), ZS_OUT_OF_RANGE, "room for 0");
  TRUE(w.num_members == 1 && w.member_id == id && id != 0);
  w.epoch = 12345; /* a rejected call writes nothing */
  EXPECT(zs_member_world(m, &w, NULL, 4), ZS_INVALID_ARGUMENT,
         "members is NULL with capacity 4");
  TRUE(w.epoch == 12345);
  EXPECT(zs_member_world(m, &w, info, 4), ZS_OK, "");
  TRUE(info[0].member_id == id && strcmp(info[0].worker_name, "bad-use") == 0 &&
       strcmp(info[0].node, "node-1") == 0);
  EXPECT(zs_member_leave(m), ZS_OK, "");
  EXPECT(zs_member_leave(m), ZS_OK, "");
  EXPECT(zs_member_close(m), ZS_OK, "");
  EXPECT(zs_member_join(m, &id), ZS_INVALID_ARGUMENT,
         "the member handle was closed");
}

/* The configuration functions: NULLs, a bad world size, bad JSON, a field
 * out of range, a state no scaler can be in, an overflow at the minimum
 * scale; no server needed. */
static void configuration(void) {
  const char* json =
      "{\"train_batch_size\": 8, \"foo\": 1, \"optimizer\": {\"type\": "
      "\"AdamW\"}, \"fp16\": {\"enabled\": true,"
      " \"initial_scale_power\": 1, \"hysteresis\": 1}}";
  zs_train_config c, bad, untouched;
  zs_trainer_state s;
  char warnings[64], line[16];
  size_t length = 0;
  double lr = 42;
  memset(&c, 0, sizeof c);
  memset(&untouched, 0, sizeof untouched);
  memset(&s, 0, sizeof s);
  EXPECT(zs_config_parse(NULL, 1, &c, NULL, 0, NULL), ZS_INVALID_ARGUMENT,
         "json is NULL");
  EXPECT(zs_config_parse(json, 1, NULL, NULL, 0, NULL), ZS_INVALID_ARGUMENT,
         "out is NULL");
  EXPECT(zs_config_parse(json, 0, &c, NULL, 0, NULL), ZS_INVALID_ARGUMENT,
         "world_size must be >= 1, got 0");
  EXPECT(zs_config_parse(json, 1, &c, NULL, 8, NULL), ZS_INVALID_ARGUMENT,
         "warnings is NULL");
  EXPECT(zs_config_parse("{\"train_batch_size\" 8}", 1, &c, NULL, 0, NULL),
         ZS_INVALID_ARGUMENT, "invalid JSON");
  EXPECT(zs_config_parse("{\"train_batch_size\": 7}", 2, &c, NULL, 0, NULL),
         ZS_INVALID_ARGUMENT, "must be a multiple of world size 2");
  EXPECT(zs_config_parse_file(NULL, 1, &c, NULL, 0, NULL), ZS_INVALID_ARGUMENT,
         "path is NULL");
  EXPECT(zs_config_parse_file("/nonexistent/ds.json", 1, &c, NULL, 0, NULL),
         ZS_NOT_FOUND, "/nonexistent/ds.json");
  TRUE(memcmp(&c, &untouched, sizeof c) == 0); /* nothing written */
  EXPECT(zs_config_parse(json, 1, &c, warnings, sizeof warnings, &length),
         ZS_OK, "");
  TRUE(strcmp(warnings, "unknown key foo ignored\n") == 0 &&
       length == strlen(warnings));
  TRUE(c.train_batch_size == 8 && c.precision == ZS_PRECISION_FP16 &&
       c.loss_scale_dynamic == 1 && strcmp(c.optimizer_type, "AdamW") == 0);
  TRUE(zs_config_describe(NULL, line, sizeof line) == 0 && line[0] == '\0');
  TRUE(zs_config_describe(&c, line, sizeof line) > sizeof line &&
       strcmp(line, "stage 0, fp16 (") == 0);
  EXPECT(zs_config_lr(NULL, 0, &lr), ZS_INVALID_ARGUMENT, "config is NULL");
  EXPECT(zs_config_lr(&c, 0, NULL), ZS_INVALID_ARGUMENT, "lr is NULL");
  bad = c, bad.lr_schedule = 9;
  EXPECT(zs_config_lr(&bad, 0, &lr), ZS_INVALID_ARGUMENT,
         "config.lr_schedule must be in [0, 3], got 9");
  bad = c, bad.servers[0] = 'x', bad.num_servers = 0;
  EXPECT(zs_config_lr(&bad, 0, &lr), ZS_INVALID_ARGUMENT, "config.num_servers");
  TRUE(lr == 42);
  EXPECT(zs_config_lr(&c, -1, &lr), ZS_INVALID_ARGUMENT,
         "step -1 is negative");
  EXPECT(zs_config_lr(&c, 5, &lr), ZS_OK, "");
  TRUE(lr == 1e-3); /* no scheduler: optimizer lr */
  EXPECT(zs_loss_scaler_init(NULL, &s), ZS_INVALID_ARGUMENT, "config is NULL");
  EXPECT(zs_loss_scaler_init(&c, NULL), ZS_INVALID_ARGUMENT, "state is NULL");
  EXPECT(zs_loss_scaler_update(&c, NULL, 1), ZS_INVALID_ARGUMENT,
         "state is NULL");
  EXPECT(zs_loss_scaler_init(&c, &s), ZS_OK, "");
  TRUE(s.loss_scale == 2 && s.loss_scale_hysteresis == 1 &&
       s.loss_scale_iteration == 0 && s.loss_scale_last_overflow == -1);
  s.loss_scale_hysteresis = 2; /* above the config's 1 */
  EXPECT(zs_loss_scaler_update(&c, &s, 1), ZS_INVALID_ARGUMENT,
         "hysteresis_left must be in [1, hysteresis]");
  TRUE(s.loss_scale_hysteresis == 2);
  s.loss_scale_hysteresis = 1;
  EXPECT(zs_loss_scaler_update(&c, &s, 1), ZS_OK, "");
  TRUE(s.loss_scale == 1 && s.loss_scale_iteration == 1 &&
       s.loss_scale_last_overflow == 0);
  EXPECT(zs_loss_scaler_update(&c, &s, 1), ZS_FAILED_PRECONDITION,
         "already at its minimum");
  TRUE(s.loss_scale == 1 && s.loss_scale_iteration == 1);
}

static void unreachable(void) {
  zs_client* c = connect_to("127.0.0.1:1", 1, 2);
  zs_model m = good_model();
  uint64_t u = 0;
  char buf[256];
  EXPECT(zs_register(c, &m), ZS_UNAVAILABLE, "127.0.0.1:1");
  EXPECT(zs_attach(c), ZS_UNAVAILABLE, "127.0.0.1:1");
  zs_client_error(c, buf, sizeof buf);
  TRUE(strstr(buf, "zs_attach: ") == buf);
  EXPECT(zs_close(c), ZS_OK, "");
  EXPECT(zs_model_size(c, &u), ZS_INVALID_ARGUMENT,
         "the client handle was closed");
  EXPECT(zs_close(c), ZS_INVALID_ARGUMENT, "the client handle was closed");
}

/* The server dies under a live client and trainer. */
static void server_killed(zs_client* c, zs_trainer* t, pid_t pid) {
  float q[164];
  zs_push_id id;
  zs_step_args a;
  zs_outcome out;
  size_t count = 0;
  zs_server_stats stats[1];
  struct timespec pause = {0, 300000000};
  memset(&a, 0, sizeof a);
  TRUE(kill(pid, SIGKILL) == 0);
  nanosleep(&pause, NULL);
  EXPECT(zs_gather(c, 0, 164, ZS_DTYPE_FP32, q, sizeof q, NULL), ZS_UNAVAILABLE,
         "Gather on shard 0");
  id.epoch = 0, id.step = 1, id.slot = 0, id.key_prefix = "bad-use";
  a.push_status = zs_push(c, 0, 164, ZS_DTYPE_FP32, q, sizeof q, &id);
  TRUE(a.push_status == ZS_UNAVAILABLE);
  EXPECT(zs_stats(c, stats, 1, &count), ZS_UNAVAILABLE, "GetStats");
  a.step = 1, a.loss_scale = 1, a.lr = 0.01;
  EXPECT(zs_trainer_step(t, &a, NULL, NULL, &out), ZS_UNAVAILABLE,
         "this rank's push failed");
  EXPECT(zs_trainer_step(t, &a, NULL, NULL, &out), ZS_FAILED_PRECONDITION,
         "the trainer failed earlier");
  EXPECT(zs_trainer_close(t), ZS_OK, "");
  EXPECT(zs_close(c), ZS_OK, "");
}

int main(int argc, char** argv) {
  zs_client* c;
  zs_trainer* t;
  if (argc != 3) {
    fprintf(stderr, "usage: bad_use ADDRESS SERVER_PID\n");
    return 2;
  }
  versions_and_options();
  null_and_invented_handles();
  c = connect_to(argv[1], 2, 2);
  client_misuse(c);
  t = trainer_misuse(c);
  members(c);
  configuration();
  unreachable();
  server_killed(c, t, (pid_t)atol(argv[2]));
  printf("%d checks, %d failed\n", checks, failures);
  return failures != 0;
}
