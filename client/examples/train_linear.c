/* Linear regression trained through zeroshard's C API: the servers hold the
 * weights and run AdamW; this program computes the gradients.
 *   cc train_linear.c $(pkg-config --cflags --libs zeroshard) -o train_linear
 *   ./train_linear 127.0.0.1:7000,127.0.0.1:7001 */
#include <stdio.h>
#include <zeroshard.h>

#define N 8  /* features: w has N elements, b one */
#define B 64 /* batch */
#define CHECK(call) \
  if ((call) != ZS_OK) return fprintf(stderr, "%s\n", zs_last_error()), 1

static float rnd(unsigned* s) { /* uniform in [-1, 1) */
  *s = *s * 1664525u + 1013904223u;
  return (float)(*s >> 8) / 8388608.0f - 1.0f;
}

int main(int argc, char** argv) {
  zs_connect_options o;
  zs_connect_options_init(&o);
  o.addresses = argc > 1 ? argv[1] : "127.0.0.1:7000";
  o.job_id = "linear";
  o.insecure = 1; /* loopback; use tls_ca_file and a token elsewhere */
  zs_client* c;
  CHECK(zs_connect(&o, &c));

  int64_t w_shape[] = {N}, b_shape[] = {1};
  zs_tensor tensors[] = {{"w", w_shape, 1, 0}, {"b", b_shape, 1, 0}};
  zs_param_group adamw;
  zs_param_group_init(&adamw); /* betas 0.9, 0.999, eps 1e-8, no decay */
  zs_model m;
  zs_model_init(&m);
  m.tensors = tensors, m.num_tensors = 2, m.groups = &adamw, m.num_groups = 1;
  CHECK(zs_register(c, &m));

  zs_trainer_options topts;
  zs_trainer_options_init(&topts);
  zs_trainer* t;
  CHECK(zs_trainer_create(c, NULL, &topts, &t)); /* NULL group: one rank */
  float p[N + 1] = {0}, g[N + 1];                /* flat layout: w, then b */
  zs_outcome out;
  CHECK(zs_trainer_start(t, p, sizeof p, NULL, NULL, NULL, &out));
  for (;;) {
    int fetched = zs_gather(c, 0, N + 1, ZS_DTYPE_FP32, p, sizeof p, NULL);
    CHECK(zs_trainer_after_fetch(t, fetched, &out));
    if (out.kind != ZS_OUTCOME_OK) continue; /* rolled back: fetch again */
    if (out.state.step == 100) break;
    unsigned seed = (unsigned)out.state.step; /* the step's batch */
    double loss = 0, sum_squares = 0;
    for (int j = 0; j <= N; ++j) g[j] = 0;
    for (int i = 0; i < B; ++i) { /* y = sum_j (j+1)/N x_j + 0.5 */
      float x[N], y = 0.5f, err = p[N];
      for (int j = 0; j < N; ++j) x[j] = rnd(&seed), y += (j + 1.0f) / N * x[j];
      for (int j = 0; j < N; ++j) err += p[j] * x[j];
      err -= y, loss += (double)err * err / B;
      for (int j = 0; j < N; ++j) g[j] += 2 * err * x[j] / B;
      g[N] += 2 * err / B;
    }
    for (int j = 0; j <= N; ++j) sum_squares += (double)g[j] * g[j];
    zs_push_id id = {out.epoch, out.state.step, 0, "worker0"};
    zs_step_args a = {0};
    a.step = out.state.step, a.sum_squares = sum_squares;
    a.loss_scale = 1, a.max_norm = 1.0, a.lr = 0.05;
    a.push_status = zs_push(c, 0, N + 1, ZS_DTYPE_FP32, g, sizeof g, &id);
    zs_decision d;
    CHECK(zs_trainer_step(t, &a, NULL, &d, &out));
    if (a.step % 20 == 0)
      printf("step %3llu  loss %.6f  grad norm %.4f  clip %.4f\n",
             (unsigned long long)a.step, loss, d.grad_norm, d.clip_coef);
  }
  printf("after %llu steps: w[0] %.4f (want %.4f), b %.4f (want 0.5)\n",
         (unsigned long long)out.state.step, p[0], 1.0 / N, p[N]);
  zs_trainer_close(t);
  return zs_close(c);
}
