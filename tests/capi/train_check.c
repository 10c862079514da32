/* Trains a linear model through the installed C API (zeroshard.h) with R
 * ranks (threads joined by zs_group callbacks over a pthread barrier), and
 * dumps what an independent reference needs to replay the run with
 * torch.optim.AdamW (adamw_replay.py): the layout and hyperparameters, the
 * gradient pushed at every step, the step's lr and decision, and the
 * parameters gathered after every step.
 *
 * The model: y = W x + b, W 6x30 (param group 0, weight decay) and b 6
 * (group 1: other betas and eps, lr_scale 0.5); 186 elements, alignment
 * 64, so W spans both servers. Every rank computes the full gradient of
 * the step's batch (a function of the step) and pushes its aligned slice.
 *
 *   train_check servers=H:P,H:P out=DIR [steps=20] [ranks=2]
 *     [norm=workers|servers] [max_norm=X] [nan_step=S]
 *     [checkpoint_interval=K] [pause_at=S pause_dir=DIR]
 *     [fail_push_at=S [fail_push_code=C]] [disagree_at=S]
 *
 * pause_at: rank 0 stops once, after fetching step S, creates
 * DIR/reached and waits for DIR/go (the test kills and restarts a server
 * meanwhile). Exit 0 and a summary line, or 1 with the failing call: the
 * first rank to fail ends the process (the others would wait for it in the
 * barrier forever).
 *
 * fail_push_at: the last rank does not push step S, the first time it
 * gets there, and passes status C (default ZS_UNAVAILABLE: its retries ran
 * out) to the step instead. disagree_at: at step S the last rank first
 * passes another max_norm, which every rank must refuse (INVALID_ARGUMENT,
 * the decision left as it was); then all call the step again alike. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zeroshard.h>

#define OUT_ROWS 6
#define IN_COLS 30
#define BATCH 16
#define MAX_RANKS 8
#define MAX_STEPS 1000
#define WORD 4096

static const char* servers;
static const char* out_dir;
static const char* pause_dir;
static int steps = 20, ranks = 2, norm_from_servers, checkpoint_interval;
static long nan_step = -1, pause_at = -1, fail_push_at = -1;
static int fail_push_code = ZS_UNAVAILABLE;
static long disagree_at = -1;
static double max_norm = 2.0;

/* The group: a shared word and a barrier. */
static pthread_barrier_t barrier;
static unsigned char shared_word[WORD];

typedef struct {
  int rank;
  int rollbacks;
  zs_decision decisions[MAX_STEPS];
} rank_ctx;

static int broadcast(void* data, size_t bytes, void* user) {
  const rank_ctx* r = user;
  if (bytes > WORD) return ZS_RESOURCE_EXHAUSTED;
  if (r->rank == 0) memcpy(shared_word, data, bytes);
  pthread_barrier_wait(&barrier);
  if (r->rank != 0) memcpy(data, shared_word, bytes);
  pthread_barrier_wait(&barrier);
  return ZS_OK;
}

static int all_gather(const void* mine, size_t bytes, void* all, void* user) {
  const rank_ctx* r = user;
  if (bytes * (size_t)ranks > WORD) return ZS_RESOURCE_EXHAUSTED;
  memcpy(shared_word + (size_t)r->rank * bytes, mine, bytes);
  pthread_barrier_wait(&barrier);
  memcpy(all, shared_word, bytes * (size_t)ranks);
  pthread_barrier_wait(&barrier);
  return ZS_OK;
}

static float rnd(unsigned* s) { /* uniform in [-1, 1) */
  *s = *s * 1664525u + 1013904223u;
  return (float)(*s >> 8) / 8388608.0f - 1.0f;
}

/* Ends the process: a rank that stops here would leave the others waiting
 * in the barrier. */
static void give_up(void) {
  fflush(NULL);
  _exit(1);
}

static void write_file(const char* name, const void* data, size_t bytes) {
  char path[1024];
  FILE* f;
  snprintf(path, sizeof path, "%s/%s", out_dir, name);
  f = fopen(path, "wb");
  if (f == NULL || fwrite(data, 1, bytes, f) != bytes || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    give_up();
  }
}

/* The gradient of 0.5/B sum_b |W x_b + b - y_b|^2 at p, for step `step`. */
static void gradient(const float* p, unsigned long step, float* g) {
  static float target[OUT_ROWS * (IN_COLS + 1)];
  unsigned seed = 12345u, data = (unsigned)step * 7919u + 1u;
  int i, j, b;
  for (i = 0; i < OUT_ROWS * (IN_COLS + 1); ++i) target[i] = rnd(&seed);
  memset(g, 0, sizeof(float) * OUT_ROWS * (IN_COLS + 1));
  for (b = 0; b < BATCH; ++b) {
    float x[IN_COLS];
    for (j = 0; j < IN_COLS; ++j) x[j] = rnd(&data);
    for (i = 0; i < OUT_ROWS; ++i) {
      float err = p[OUT_ROWS * IN_COLS + i] - target[OUT_ROWS * IN_COLS + i];
      for (j = 0; j < IN_COLS; ++j) {
        err += (p[i * IN_COLS + j] - target[i * IN_COLS + j]) * x[j];
      }
      for (j = 0; j < IN_COLS; ++j) g[i * IN_COLS + j] += err * x[j] / BATCH;
      g[OUT_ROWS * IN_COLS + i] += err / BATCH;
    }
  }
}

static void fail(const char* what, int rank) {
  fprintf(stderr, "rank %d: %s: %s\n", rank, what, zs_last_error());
  give_up();
}

static void wait_for_go(void) {
  char path[1024];
  FILE* f;
  int i;
  struct timespec tick = {0, 50000000};
  snprintf(path, sizeof path, "%s/reached", pause_dir);
  f = fopen(path, "w");
  if (f != NULL) fclose(f);
  snprintf(path, sizeof path, "%s/go", pause_dir);
  for (i = 0; i < 1200; ++i) {
    if ((f = fopen(path, "r")) != NULL) {
      fclose(f);
      return;
    }
    nanosleep(&tick, NULL);
  }
}

static void connect_and_register(zs_client** c, int rank) {
  static int64_t w_shape[] = {OUT_ROWS, IN_COLS}, b_shape[] = {OUT_ROWS};
  zs_tensor tensors[2] = {{"w", w_shape, 2, 0}, {"b", b_shape, 1, 1}};
  zs_param_group groups[2];
  zs_connect_options o;
  zs_model m;
  zs_connect_options_init(&o);
  o.addresses = servers, o.job_id = "capi-train", o.insecure = 1;
  o.deadline_seconds = 10;
  if (zs_connect(&o, c) != ZS_OK) fail("zs_connect", rank);
  zs_param_group_init(&groups[0]);
  groups[0].weight_decay = 0.1;
  zs_param_group_init(&groups[1]);
  groups[1].beta1 = 0.8, groups[1].beta2 = 0.99, groups[1].eps = 1e-6;
  groups[1].lr_scale = 0.5;
  zs_model_init(&m);
  m.tensors = tensors, m.num_tensors = 2, m.groups = groups, m.num_groups = 2;
  if (zs_register(*c, &m) != ZS_OK) fail("zs_register", rank);
  if (rank == 0) { /* the layout and hyperparameters, for the replay */
    char meta[2048];
    int k, len = 0;
    uint64_t off, cnt, total;
    if (zs_model_size(*c, &total) != ZS_OK) fail("zs_model_size", 0);
    len += snprintf(meta + len, sizeof meta - len,
                    "n %llu\nsteps %d\nnorm %s\nmax_norm %a\n",
                    (unsigned long long)total, steps,
                    norm_from_servers ? "servers" : "workers", max_norm);
    for (k = 0; k < ranks; ++k) {
      if (zs_slice(*c, (uint32_t)ranks, (uint32_t)k, &off, &cnt) != ZS_OK)
        fail("zs_slice", 0);
      len += snprintf(meta + len, sizeof meta - len, "slice %llu %llu\n",
                      (unsigned long long)off, (unsigned long long)cnt);
    }
    for (k = 0; k < 2; ++k) {
      if (zs_tensor_range(*c, tensors[k].name, &off, &cnt) != ZS_OK)
        fail("zs_tensor_range", 0);
      len += snprintf(meta + len, sizeof meta - len, "tensor %s %llu %llu %u\n",
                      tensors[k].name, (unsigned long long)off,
                      (unsigned long long)cnt, tensors[k].param_group);
      len +=
          snprintf(meta + len, sizeof meta - len, "group %d %a %a %a %a %a\n",
                   k, groups[k].beta1, groups[k].beta2, groups[k].eps,
                   groups[k].weight_decay, groups[k].lr_scale);
    }
    write_file("meta.txt", meta, (size_t)len);
  }
}

static void* run_rank(void* arg) {
  rank_ctx* r = arg;
  const int rank = r->rank;
  enum { N = OUT_ROWS * (IN_COLS + 1) };
  float p[N], g[N], init[N];
  char name[64], key[32];
  uint64_t off, cnt;
  zs_client* c;
  zs_trainer* t;
  zs_trainer_options topts;
  zs_group group = {0};
  zs_trainer_state now = {0};
  zs_outcome out;
  unsigned seed = 99u;
  int i, paused = 0, push_failed = 0;
  FILE* log = NULL;
  connect_and_register(&c, rank);
  if (zs_slice(c, (uint32_t)ranks, (uint32_t)rank, &off, &cnt) != ZS_OK) {
    fail("zs_slice", rank);
  }
  group.rank = rank, group.size = ranks, group.user = r;
  group.broadcast = broadcast, group.all_gather = all_gather;
  zs_trainer_options_init(&topts);
  topts.checkpoint_interval = checkpoint_interval;
  topts.recovery_timeout_seconds = 30;
  if (zs_trainer_create(c, &group, &topts, &t) != ZS_OK) {
    fail("zs_trainer_create", rank);
  }
  for (i = 0; i < N; ++i) init[i] = 0.1f * rnd(&seed);
  now.seed = 1234, now.loss_scale = 1;
  if (zs_trainer_start(t, rank == 0 ? init : NULL, rank == 0 ? sizeof init : 0,
                       NULL, NULL, &now, &out) != ZS_OK) {
    fail("zs_trainer_start", rank);
  }
  if (out.kind != ZS_OUTCOME_OK) {
    printf("rank %d: resumed at step %llu (epoch %llu)\n", rank,
           (unsigned long long)out.state.step, (unsigned long long)out.epoch);
  }
  if (rank == 0) {
    char path[1024];
    snprintf(path, sizeof path, "%s/steps.txt", out_dir);
    log = fopen(path, out.state.step == 0 ? "w" : "a");
  }
  for (;;) {
    int fetched = zs_gather(c, 0, N, ZS_DTYPE_FP32, p, sizeof p, NULL);
    zs_step_args a;
    zs_trainer_state after;
    zs_decision d;
    zs_push_id id;
    double sum_squares = 0;
    if (zs_trainer_after_fetch(t, fetched, &out) != ZS_OK) {
      fail("zs_trainer_after_fetch", rank);
    }
    if (out.kind == ZS_OUTCOME_ROLLED_BACK) {
      printf("rank %d: rolled back to step %llu (epoch %llu)\n", rank,
             (unsigned long long)out.state.step, (unsigned long long)out.epoch);
      r->rollbacks++;
    }
    if (out.kind != ZS_OUTCOME_OK) continue;
    if (out.state.data_offset != (int64_t)out.state.step ||
        out.state.seed != 1234) {
      fprintf(stderr, "rank %d: the workers' state at step %llu is wrong\n",
              rank, (unsigned long long)out.state.step);
      give_up();
    }
    if (out.state.step == 0 && memcmp(p, init, sizeof p) != 0) {
      fprintf(stderr, "rank %d: gathered initial parameters differ\n", rank);
      give_up();
    }
    if (rank == 0) {
      snprintf(name, sizeof name, "p%llu.bin",
               (unsigned long long)out.state.step);
      write_file(name, p, sizeof p);
    }
    if (out.state.step == (uint64_t)steps) break;
    if (rank == 0 && !paused && (long)out.state.step == pause_at) {
      paused = 1;
      wait_for_go();
    }
    gradient(p, (unsigned long)out.state.step, g);
    if ((long)out.state.step == nan_step) g[N - 1] = NAN; /* on every rank */
    memset(&a, 0, sizeof a);
    for (i = (int)off; i < (int)(off + cnt); ++i) {
      sum_squares += (double)g[i] * g[i];
      if (!isfinite(g[i])) a.nonfinite = 1;
    }
    snprintf(key, sizeof key, "rank%d", rank);
    id.epoch = out.epoch, id.step = out.state.step, id.slot = 0;
    id.key_prefix = key;
    if (rank == ranks - 1 && !push_failed &&
        (long)out.state.step == fail_push_at) {
      push_failed = 1;
      a.push_status = fail_push_code;
      printf("rank %d: step %llu: push reported as failed (code %d)\n", rank,
             (unsigned long long)out.state.step, fail_push_code);
    } else {
      a.push_status = zs_push(c, off, cnt, ZS_DTYPE_FP32, g + off,
                              cnt * sizeof(float), &id);
    }
    a.step = out.state.step, a.norm_from_servers = norm_from_servers;
    a.sum_squares = sum_squares, a.loss_scale = 1, a.max_norm = max_norm;
    a.lr = 0.05 * (out.state.step < 3 ? (out.state.step + 1) / 4.0 : 1.0);
    after = out.state;
    after.data_offset = (int64_t)out.state.step + 1;
    if ((long)a.step == disagree_at) {
      zs_step_args other = a;
      int rc;
      if (rank == ranks - 1) other.max_norm = a.max_norm * 2;
      d.grad_norm = -1;
      rc = zs_trainer_step(t, &other, &after, &d, &out);
      if (rc != ZS_INVALID_ARGUMENT || d.grad_norm != -1) {
        fprintf(stderr, "rank %d: disagreeing max_norm: code %d, norm %g\n",
                rank, rc, d.grad_norm);
        give_up();
      }
      printf("rank %d: refused: %s\n", rank, zs_last_error());
    }
    if (zs_trainer_step(t, &a, &after, &d, &out) != ZS_OK) {
      fail("zs_trainer_step", rank);
    }
    if (out.kind == ZS_OUTCOME_ROLLED_BACK) {
      printf("rank %d: step %llu rolled back to step %llu (epoch %llu)\n", rank,
             (unsigned long long)a.step, (unsigned long long)out.state.step,
             (unsigned long long)out.epoch);
      r->rollbacks++;
      continue;
    }
    r->decisions[a.step] = d;
    if (rank == 0) {
      snprintf(name, sizeof name, "g%llu.bin", (unsigned long long)a.step);
      write_file(name, g, sizeof g);
      fprintf(log, "%llu %a %a %a %d\n", (unsigned long long)a.step, a.lr,
              d.grad_norm, (double)d.clip_coef, d.skipped);
      fflush(log);
    }
  }
  if (log != NULL) fclose(log);
  if (rank == 0) {
    zs_server_stats stats[4];
    size_t n = 0, k;
    if (zs_stats(c, stats, 4, &n) != ZS_OK) {
      fail("zs_stats", rank);
    }
    for (k = 0; k < n; ++k) {
      printf("server %u: step %llu, %llu updates, owns [%llu, +%llu)\n",
             stats[k].shard_index, (unsigned long long)stats[k].step,
             (unsigned long long)stats[k].optimizer_steps,
             (unsigned long long)stats[k].owned_offset,
             (unsigned long long)stats[k].owned_count);
      if (stats[k].step != (uint64_t)steps) {
        fprintf(stderr, "server %u is at step %llu\n", stats[k].shard_index,
                (unsigned long long)stats[k].step);
        give_up();
      }
    }
  }
  if (zs_trainer_close(t) != ZS_OK || zs_close(c) != ZS_OK) {
    fail("close", rank);
  }
  return NULL;
}

static const char* arg(int argc, char** argv, const char* key) {
  size_t n = strlen(key);
  int i;
  for (i = 1; i < argc; ++i) {
    if (strncmp(argv[i], key, n) == 0 && argv[i][n] == '=')
      return argv[i] + n + 1;
  }
  return NULL;
}

int main(int argc, char** argv) {
  static rank_ctx ctx[MAX_RANKS];
  pthread_t threads[MAX_RANKS];
  const char* v;
  int k, s, rollbacks = 0;
  servers = arg(argc, argv, "servers");
  out_dir = arg(argc, argv, "out");
  pause_dir = arg(argc, argv, "pause_dir");
  if ((v = arg(argc, argv, "steps"))) steps = atoi(v);
  if ((v = arg(argc, argv, "ranks"))) ranks = atoi(v);
  if ((v = arg(argc, argv, "norm"))) norm_from_servers = !strcmp(v, "servers");
  if ((v = arg(argc, argv, "max_norm"))) max_norm = atof(v);
  if ((v = arg(argc, argv, "nan_step"))) nan_step = atol(v);
  if ((v = arg(argc, argv, "pause_at"))) pause_at = atol(v);
  if ((v = arg(argc, argv, "fail_push_at"))) fail_push_at = atol(v);
  if ((v = arg(argc, argv, "fail_push_code"))) fail_push_code = atoi(v);
  if ((v = arg(argc, argv, "disagree_at"))) disagree_at = atol(v);
  if ((v = arg(argc, argv, "checkpoint_interval")))
    checkpoint_interval = atoi(v);
  if (servers == NULL || out_dir == NULL || ranks < 1 || ranks > MAX_RANKS ||
      steps < 1 || steps >= MAX_STEPS || (pause_at >= 0 && !pause_dir)) {
    fprintf(stderr, "usage: see the comment at the top of train_check.c\n");
    return 2;
  }
  pthread_barrier_init(&barrier, NULL, (unsigned)ranks);
  for (k = 0; k < ranks; ++k) {
    ctx[k].rank = k;
    pthread_create(&threads[k], NULL, run_rank, &ctx[k]);
  }
  for (k = 0; k < ranks; ++k) {
    pthread_join(threads[k], NULL);
    rollbacks += ctx[k].rollbacks;
  }
  for (k = 1; k < ranks; ++k) {
    for (s = 0; s < steps; ++s) {
      const zs_decision* a = &ctx[0].decisions[s];
      const zs_decision* b = &ctx[k].decisions[s];
      if (memcmp(&a->grad_norm, &b->grad_norm, sizeof(double)) != 0 ||
          memcmp(&a->clip_coef, &b->clip_coef, sizeof(float)) != 0 ||
          memcmp(&a->grad_scale, &b->grad_scale, sizeof(float)) != 0 ||
          a->skipped != b->skipped) {
        fprintf(stderr, "rank %d decided step %d differently\n", k, s);
        return 1;
      }
    }
  }
  printf(
      "trained %d steps on %d ranks (norm from the %s), %d roll backs; "
      "every rank saw the same decisions\n",
      steps, ranks, norm_from_servers ? "servers" : "workers", rollbacks);
  return 0;
}
