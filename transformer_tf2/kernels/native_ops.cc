// Fused CPU kernels, TensorFlow custom ops (built by native.py): the LayerNorm of the
// train step and of a decoding step, and two more kernels of a decoding step.
//
// NativeLayerNorm: layer normalization over the last axis (3.1), one pass per row
//   x (..., d), gamma (d), beta (d) -> y (..., d) = gamma * (x - mean) * rstd + beta,
//   mean (...), rstd (...) = 1 / sqrt(var + epsilon) (the biased variance, as Keras).
// NativeLayerNormGrad: its gradient from the forward's mean and rstd
//   dy, x (..., d), gamma (d), mean, rstd (...) -> dx (..., d), dgamma (d), dbeta (d),
//   with n = (x - mean) rstd and g = dy gamma:
//   dx = rstd (g - mean_row(g) - n mean_row(g n)), dgamma = sum_rows(dy n),
//   dbeta = sum_rows(dy).
// TensorFlow's own ops make about ten passes over the (rows, d) tensors for the same
// work; these make one each way. Rows are split over the CPU worker threads; the column
// sums of the gradient are summed in fixed blocks of rows and then in block order, so
// that they do not depend on the number of threads.
//
// A decoding step (greedy_search.py's and beam_search.py's decoders, through
// fast_ops.decoding_function) runs NativeLayerNorm forward and:
// NativeStepAttention: the attention of one query position over cached heads (3.2.1)
//   q (N, h, 1, d), k (M, h, T, d), v like k, mask (M, T) bool or (1, T), or (0,) for
//   none, rows (N,) int32 in [0, M) or (0,) -> out (N, h, 1, d), head i = softmax(q_i
//   k_i^T / div, masked keys at masked_value) v_i: what TensorFlow's ops compute in five
//   ops (two batched matmuls of N * h products of one row, a scale, a mask and a
//   softmax). Query row r reads key (and mask) row rows[r]: a search's hypotheses over
//   one copy of their sentence's encoder keys/values; without rows, key row r // g with
//   g = N / M (g = 1: each query its own keys).
// NativeTopLogSoftmax: log_softmax(logits) at each row's k largest logits
//   logits (R, V) -> values (R, k) float, indices (R, k) int32, largest first, the lower
//   index first among equal logits (as tf.math.top_k): the beam search's top k of each
//   hypothesis (beam_search.best_extensions) in two passes over the row (the second is
//   Eigen's vectorized exp), where TensorFlow's ops make five.
// NativeGatherAppend: a self-attention cache's rows for the next step and the step's new
//   position, in one copy: cache (N, h, T, d), rows (R,) int32 in [0, N), new (R, h, 1, d)
//   -> out (R, h, T + 1, d), out[r, :, :T] = cache[rows[r]], out[r, :, T] = new[r]: the
//   beam's reorder (a gather) and the append (a concat), which TensorFlow's ops copy twice.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "Eigen/Core"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

constexpr int64_t kBlockRows = 64;  // rows per partial column sum of the gradient

// ---------------------------------------------------------------------------------------
// Op registrations
// ---------------------------------------------------------------------------------------
absl::Status ForwardShapes(InferenceContext* c) {  // y like input 0; mean, rstd per row
  ShapeHandle x, rows;
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &x));
  TF_RETURN_IF_ERROR(c->Subshape(x, 0, -1, &rows));
  c->set_output(0, x);
  c->set_output(1, rows);
  c->set_output(2, rows);
  return absl::OkStatus();
}

REGISTER_OP("NativeLayerNorm")
    .Input("x: float")
    .Input("gamma: float")
    .Input("beta: float")
    .Output("y: float")
    .Output("mean: float")
    .Output("rstd: float")
    .Attr("epsilon: float")
    .SetShapeFn(ForwardShapes);

REGISTER_OP("NativeLayerNormGrad")
    .Input("dy: float")
    .Input("x: float")
    .Input("gamma: float")
    .Input("mean: float")
    .Input("rstd: float")
    .Output("dx: float")
    .Output("dgamma: float")
    .Output("dbeta: float")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(1));
      c->set_output(1, c->input(2));
      c->set_output(2, c->input(2));
      return absl::OkStatus();
    });

REGISTER_OP("NativeStepAttention")
    .Input("q: float")
    .Input("k: float")
    .Input("v: float")
    .Input("mask: bool")
    .Input("rows: int32")
    .Output("out: float")
    .Attr("div: float")
    .Attr("masked_value: float")
    .SetShapeFn([](InferenceContext* c) {  // out like q, (N, h, 1, d)
      ShapeHandle q;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &q));
      c->set_output(0, q);
      return absl::OkStatus();
    });

REGISTER_OP("NativeGatherAppend")
    .Input("cache: float")
    .Input("rows: int32")
    .Input("fresh: float")
    .Output("out: float")
    .SetShapeFn([](InferenceContext* c) {  // out (R, h, T + 1, d)
      ShapeHandle cache, fresh;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &cache));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 4, &fresh));
      tensorflow::shape_inference::DimensionHandle t;
      TF_RETURN_IF_ERROR(c->Add(c->Dim(cache, 2), 1, &t));
      c->set_output(0, c->MakeShape({c->Dim(fresh, 0), c->Dim(cache, 1), t, c->Dim(cache, 3)}));
      return absl::OkStatus();
    });

REGISTER_OP("NativeTopLogSoftmax")
    .Input("logits: float")
    .Output("values: float")
    .Output("indices: int32")
    .Attr("k: int >= 1")
    .SetShapeFn([](InferenceContext* c) {  // values, indices (R, k)
      ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &x));
      int k = 0;
      TF_RETURN_IF_ERROR(c->GetAttr("k", &k));
      c->set_output(0, c->MakeShape({c->Dim(x, 0), k}));
      c->set_output(1, c->MakeShape({c->Dim(x, 0), k}));
      return absl::OkStatus();
    });

// ---------------------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------------------
// One row h (d) normalized into y, with its mean and rstd.
inline void NormalizeRow(const float* h, int64_t d, const float* g, const float* b, float eps,
                         float* y, float* mean, float* rstd) {
  const float inv_d = 1.0f / static_cast<float>(d);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < d; ++j) sum += h[j];
  const float mu = sum * inv_d;
  float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
  for (int64_t j = 0; j < d; ++j) sq += (h[j] - mu) * (h[j] - mu);
  const float r = 1.0f / std::sqrt(sq * inv_d + eps);
#pragma omp simd
  for (int64_t j = 0; j < d; ++j) y[j] = (h[j] - mu) * r * g[j] + b[j];
  *mean = mu;
  *rstd = r;
}

// The gradient of one row: dh (d) from dy and h, and its terms of the column sums
// (pg += dy n, pb += dy).
inline void NormalizeRowGrad(const float* dy, const float* h, int64_t d, const float* g, float mu,
                             float r, float* pg, float* pb, float* dh) {
  const float inv_d = 1.0f / static_cast<float>(d);
  float sum_g = 0.0f, sum_gn = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gn)
  for (int64_t j = 0; j < d; ++j) {
    const float n = (h[j] - mu) * r;
    const float dyj = dy[j];
    const float gj = dyj * g[j];
    sum_g += gj;
    sum_gn += gj * n;
    pg[j] += dyj * n;
    pb[j] += dyj;
  }
  const float mean_g = sum_g * inv_d, mean_gn = sum_gn * inv_d;
#pragma omp simd
  for (int64_t j = 0; j < d; ++j) {
    dh[j] = r * (dy[j] * g[j] - mean_g - (h[j] - mu) * r * mean_gn);
  }
}

// One head of one query: scores s_t = q k_t / div (masked_value where mask[t] is false),
// weights softmax(s) (written over s), out = sum_t w_t v_t. q, out (d); k, v (T, d); s (T)
// is Eigen's own (aligned) array, so that how Eigen splits its sum into vectors, and so
// the result, never depends on where a buffer happens to start.
inline void AttendHead(const float* q, const float* k, const float* v, const bool* mask,
                       int64_t t_k, int64_t d, float div, float masked_value,
                       Eigen::ArrayXf& s, float* out) {
  float top = -INFINITY;
  for (int64_t t = 0; t < t_k; ++t) {
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < d; ++j) dot += q[j] * k[t * d + j];
    s[t] = (mask == nullptr || mask[t]) ? dot / div : masked_value;
    top = std::max(top, s[t]);
  }
  s = (s - top).exp();  // Eigen's vectorized exp, as TensorFlow's softmax
  const float sum = s.sum();
  std::fill(out, out + d, 0.0f);
  for (int64_t t = 0; t < t_k; ++t) {
    const float w = s[t] / sum;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) out[j] += w * v[t * d + j];
  }
}

// One row z (V) of logits: its k largest (values[0] the largest; the lower index first
// among equals) as log-softmax values (z - max) - log sum exp(z - max). The row is read in
// blocks of kTopBlock: a block whose largest logit does not beat the k-th found so far
// (most of them, after the first few) is passed over after one vector maximum.
constexpr int64_t kTopBlock = 32;

inline void TopLogSoftmaxRow(const float* z, int64_t n, int k, float* values, int32_t* indices) {
  int found = 0;
  for (int64_t lo = 0; lo < n; lo += kTopBlock) {
    const int64_t hi = std::min(n, lo + kTopBlock);
    if (found == k) {
      float block_top = -INFINITY;
#pragma omp simd reduction(max : block_top)
      for (int64_t j = lo; j < hi; ++j) block_top = std::max(block_top, z[j]);
      if (!(block_top > values[k - 1])) continue;
    }
    for (int64_t j = lo; j < hi; ++j) {
      if (found == k && !(z[j] > values[k - 1])) continue;
      int at = found < k ? found++ : k - 1;  // the slot it takes, then moved up past smaller
      while (at > 0 && z[j] > values[at - 1]) {
        values[at] = values[at - 1];
        indices[at] = indices[at - 1];
        --at;
      }
      values[at] = z[j];
      indices[at] = static_cast<int32_t>(j);
    }
  }
  const float top = values[0];
  const float log_sum = std::log((Eigen::Map<const Eigen::ArrayXf>(z, n) - top).exp().sum());
  for (int i = 0; i < found; ++i) values[i] = (values[i] - top) - log_sum;
}

// ---------------------------------------------------------------------------------------
// Checks and threading
// ---------------------------------------------------------------------------------------
// x at least 1-D, gamma (and beta) of its last dimension.
absl::Status CheckShapes(const Tensor& x, const Tensor& gamma, int64_t* rows, int64_t* d) {
  if (x.dims() < 1) return absl::InvalidArgumentError("NativeLayerNorm: x must have a last axis");
  *d = x.dim_size(x.dims() - 1);
  if (gamma.dims() != 1 || gamma.dim_size(0) != *d) {
    return absl::InvalidArgumentError("NativeLayerNorm: gamma must be (d,), d = x's last axis");
  }
  *rows = *d ? x.NumElements() / *d : 0;
  return absl::OkStatus();
}

void ParallelRows(OpKernelContext* ctx, int64_t count, int64_t cost,
                  const std::function<void(int64_t, int64_t)>& work) {
  ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(count, cost, work);
}

// The gradient's column sums: row(i, pg, pb) for every row, each block of kBlockRows rows
// into its own partial sums, which are then added in block order into dgamma, dbeta.
void GradientRows(OpKernelContext* ctx, int64_t rows, int64_t d, float* dgamma, float* dbeta,
                  const std::function<void(int64_t, float*, float*)>& row) {
  std::fill(dgamma, dgamma + d, 0.0f);
  std::fill(dbeta, dbeta + d, 0.0f);
  if (rows == 0 || d == 0) return;
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  std::vector<float> partial(2 * blocks * d, 0.0f);  // per block: dgamma, then dbeta
  ParallelRows(ctx, blocks, 12 * d * kBlockRows, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) {
      float* pg = partial.data() + 2 * k * d;
      const int64_t end = std::min(rows, (k + 1) * kBlockRows);
      for (int64_t i = k * kBlockRows; i < end; ++i) row(i, pg, pg + d);
    }
  });
  for (int64_t k = 0; k < blocks; ++k) {
    const float* pg = partial.data() + 2 * k * d;
    for (int64_t j = 0; j < d; ++j) {
      dgamma[j] += pg[j];
      dbeta[j] += pg[d + j];
    }
  }
}

const float* In(OpKernelContext* ctx, int index) { return ctx->input(index).flat<float>().data(); }

float* Output(OpKernelContext* ctx, int index, const TensorShape& shape, absl::Status* status) {
  Tensor* t = nullptr;
  *status = ctx->allocate_output(index, shape, &t);
  return status->ok() ? t->flat<float>().data() : nullptr;
}

// y, mean and rstd of the forward kernel, allocated like x.
struct ForwardOutputs {
  float* y = nullptr;
  float *mean = nullptr, *rstd = nullptr;
  absl::Status Allocate(OpKernelContext* ctx, const TensorShape& shape) {
    TensorShape rows = shape;
    rows.RemoveLastDims(1);
    Tensor *t0 = nullptr, *t1 = nullptr, *t2 = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(0, shape, &t0));
    TF_RETURN_IF_ERROR(ctx->allocate_output(1, rows, &t1));
    TF_RETURN_IF_ERROR(ctx->allocate_output(2, rows, &t2));
    y = t0->flat<float>().data();
    mean = t1->flat<float>().data();
    rstd = t2->flat<float>().data();
    return absl::OkStatus();
  }
};

// ---------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------
class NativeLayerNormOp : public OpKernel {
 public:
  explicit NativeLayerNormOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    int64_t rows = 0, d = 0;
    OP_REQUIRES_OK(ctx, CheckShapes(x, ctx->input(1), &rows, &d));
    OP_REQUIRES(ctx, ctx->input(2).NumElements() == d,
                absl::InvalidArgumentError("NativeLayerNorm: beta must be (d,)"));
    ForwardOutputs out;
    OP_REQUIRES_OK(ctx, out.Allocate(ctx, x.shape()));
    const float *xp = In(ctx, 0), *g = In(ctx, 1), *b = In(ctx, 2);
    ParallelRows(ctx, rows, 8 * d, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        NormalizeRow(xp + i * d, d, g, b, epsilon_, out.y + i * d, out.mean + i, out.rstd + i);
      }
    });
  }

 private:
  float epsilon_;
};

class NativeLayerNormGradOp : public OpKernel {
 public:
  explicit NativeLayerNormGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(1);
    const Tensor& gamma = ctx->input(2);
    int64_t rows = 0, d = 0;
    OP_REQUIRES_OK(ctx, CheckShapes(x, gamma, &rows, &d));
    OP_REQUIRES(ctx, ctx->input(0).shape() == x.shape(),
                absl::InvalidArgumentError("NativeLayerNormGrad: dy and x differ in shape"));
    OP_REQUIRES(ctx, ctx->input(3).NumElements() == rows && ctx->input(4).NumElements() == rows,
                absl::InvalidArgumentError("NativeLayerNormGrad: mean and rstd need one per row"));
    absl::Status status;
    float* dx = Output(ctx, 0, x.shape(), &status);
    OP_REQUIRES_OK(ctx, status);
    float* dgamma = Output(ctx, 1, gamma.shape(), &status);
    OP_REQUIRES_OK(ctx, status);
    float* dbeta = Output(ctx, 2, gamma.shape(), &status);
    OP_REQUIRES_OK(ctx, status);
    const float *dy = In(ctx, 0), *xp = In(ctx, 1), *g = In(ctx, 2);
    const float *mean = In(ctx, 3), *rstd = In(ctx, 4);
    GradientRows(ctx, rows, d, dgamma, dbeta, [&](int64_t i, float* pg, float* pb) {
      NormalizeRowGrad(dy + i * d, xp + i * d, d, g, mean[i], rstd[i], pg, pb, dx + i * d);
    });
  }
};

// q (N, h, 1, d), k and v (M, h, T, d), mask (M or 1, T) or empty, rows (N,) or empty.
class NativeStepAttentionOp : public OpKernel {
 public:
  explicit NativeStepAttentionOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("div", &div_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("masked_value", &masked_value_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor &q = ctx->input(0), &k = ctx->input(1), &v = ctx->input(2);
    const Tensor &mask = ctx->input(3), &rows = ctx->input(4);
    OP_REQUIRES(ctx, q.dims() == 4 && q.dim_size(2) == 1 && k.dims() == 4,
                absl::InvalidArgumentError("NativeStepAttention: q (N, h, 1, d), k (M, h, T, d)"));
    const int64_t n = q.dim_size(0), h = q.dim_size(1), d = q.dim_size(3), t_k = k.dim_size(2);
    const int64_t n_k = k.dim_size(0);
    const bool indexed = rows.NumElements() > 0;  // else row r // g
    OP_REQUIRES(ctx,
                (indexed ? rows.dims() == 1 && rows.dim_size(0) == n
                         : (n_k > 0 ? n % n_k == 0 : n == 0)) &&
                    k.dim_size(1) == h && k.dim_size(3) == d && v.shape() == k.shape(),
                absl::InvalidArgumentError("NativeStepAttention: q (N, h, 1, d), k and v (M, h, "
                                           "T, d), rows (N,) or none differ in shape"));
    const int32_t* index = indexed ? rows.flat<int32_t>().data() : nullptr;
    for (int64_t i = 0; indexed && i < n; ++i) {
      OP_REQUIRES(ctx, index[i] >= 0 && index[i] < n_k,
                  absl::InvalidArgumentError("NativeStepAttention: a row outside the keys"));
    }
    const int64_t group = n_k > 0 && !indexed ? n / n_k : 1;  // query rows per key row
    const bool masked = mask.NumElements() > 0;
    OP_REQUIRES(ctx,
                !masked || (mask.dims() == 2 && mask.dim_size(1) == t_k &&
                            (mask.dim_size(0) == n_k || mask.dim_size(0) == 1)),
                absl::InvalidArgumentError("NativeStepAttention: mask must be (M or 1, T)"));
    absl::Status status;
    float* out = Output(ctx, 0, q.shape(), &status);
    OP_REQUIRES_OK(ctx, status);
    const float *qp = In(ctx, 0), *kp = In(ctx, 1), *vp = In(ctx, 2);
    const bool* mp = masked ? mask.flat<bool>().data() : nullptr;
    const int64_t mask_rows = masked ? mask.dim_size(0) : 0;
    ParallelRows(ctx, n * h, 4 * t_k * d + 20 * t_k, [&](int64_t lo, int64_t hi) {
      Eigen::ArrayXf scores(t_k);
      for (int64_t i = lo; i < hi; ++i) {  // i = row * h + head
        const int64_t key_row = indexed ? index[i / h] : i / h / group;
        const int64_t j = key_row * h + i % h;  // the key row's head
        const bool* m = mp == nullptr ? nullptr : mp + (mask_rows == 1 ? 0 : key_row) * t_k;
        AttendHead(qp + i * d, kp + j * t_k * d, vp + j * t_k * d, m, t_k, d, div_,
                   masked_value_, scores, out + i * d);
      }
    });
  }

 private:
  float div_, masked_value_;
};

class NativeTopLogSoftmaxOp : public OpKernel {
 public:
  explicit NativeTopLogSoftmaxOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("k", &k_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& logits = ctx->input(0);
    OP_REQUIRES(ctx, logits.dims() == 2 && logits.dim_size(1) >= k_,
                absl::InvalidArgumentError("NativeTopLogSoftmax: logits (R, V) with V >= k"));
    const int64_t rows = logits.dim_size(0), n = logits.dim_size(1);
    absl::Status status;
    float* values = Output(ctx, 0, TensorShape({rows, k_}), &status);
    OP_REQUIRES_OK(ctx, status);
    Tensor* index_tensor = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({rows, k_}), &index_tensor));
    int32_t* indices = index_tensor->flat<int32_t>().data();
    const float* z = In(ctx, 0);
    ParallelRows(ctx, rows, 24 * n, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        TopLogSoftmaxRow(z + i * n, n, k_, values + i * k_, indices + i * k_);
      }
    });
  }

 private:
  int k_;
};

// cache (N, h, T, d), rows (R,), fresh (R, h, 1, d) -> (R, h, T + 1, d).
class NativeGatherAppendOp : public OpKernel {
 public:
  explicit NativeGatherAppendOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor &cache = ctx->input(0), &rows = ctx->input(1), &fresh = ctx->input(2);
    OP_REQUIRES(ctx, cache.dims() == 4 && fresh.dims() == 4 && fresh.dim_size(2) == 1,
                absl::InvalidArgumentError("NativeGatherAppend: cache (N, h, T, d), new (R, h, "
                                           "1, d)"));
    const int64_t n = cache.dim_size(0), h = cache.dim_size(1), t = cache.dim_size(2);
    const int64_t d = cache.dim_size(3), r = fresh.dim_size(0);
    OP_REQUIRES(ctx,
                fresh.dim_size(1) == h && fresh.dim_size(3) == d && rows.dims() == 1 &&
                    rows.dim_size(0) == r,
                absl::InvalidArgumentError("NativeGatherAppend: cache, rows, new differ in shape"));
    const int32_t* index = rows.flat<int32_t>().data();
    for (int64_t i = 0; i < r; ++i) {
      OP_REQUIRES(ctx, index[i] >= 0 && index[i] < n,
                  absl::InvalidArgumentError("NativeGatherAppend: a row outside the cache"));
    }
    absl::Status status;
    float* out = Output(ctx, 0, TensorShape({r, h, t + 1, d}), &status);
    OP_REQUIRES_OK(ctx, status);
    const float *cp = In(ctx, 0), *fp = In(ctx, 2);
    ParallelRows(ctx, r * h, 2 * (t + 1) * d, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {  // i = row * h + head
        const float* from = cp + (index[i / h] * h + i % h) * t * d;
        float* to = out + i * (t + 1) * d;
        std::memcpy(to, from, sizeof(float) * t * d);
        std::memcpy(to + t * d, fp + i * d, sizeof(float) * d);
      }
    });
  }
};

REGISTER_KERNEL_BUILDER(Name("NativeLayerNorm").Device(tensorflow::DEVICE_CPU), NativeLayerNormOp);
REGISTER_KERNEL_BUILDER(Name("NativeGatherAppend").Device(tensorflow::DEVICE_CPU),
                        NativeGatherAppendOp);
REGISTER_KERNEL_BUILDER(Name("NativeLayerNormGrad").Device(tensorflow::DEVICE_CPU),
                        NativeLayerNormGradOp);
REGISTER_KERNEL_BUILDER(Name("NativeStepAttention").Device(tensorflow::DEVICE_CPU),
                        NativeStepAttentionOp);
REGISTER_KERNEL_BUILDER(Name("NativeTopLogSoftmax").Device(tensorflow::DEVICE_CPU),
                        NativeTopLogSoftmaxOp);

}  // namespace
