// Fused CPU kernels of the train step, as TensorFlow custom ops (built by native.py).
//
// NativeLayerNorm: layer normalization over the last axis (3.1), one pass per row
//   x (..., d), gamma (d), beta (d) -> y (..., d) = gamma * (x - mean) * rstd + beta,
//   mean (...), rstd (...) = 1 / sqrt(var + epsilon) (the biased variance, as Keras).
// NativeLayerNormGrad: its gradient from the forward's mean and rstd
//   dy, x (..., d), gamma (d), mean, rstd (...) -> dx (..., d), dgamma (d), dbeta (d),
//   with n = (x - mean) rstd and g = dy gamma:
//   dx = rstd (g - mean_row(g) - n mean_row(g n)), dgamma = sum_rows(dy n),
//   dbeta = sum_rows(dy).
// NativeResidualLayerNorm: the post-norm residual sublayer's end (3.1, 5.4),
//   LayerNorm(x + Dropout(s)) of x, s (..., d), with seed (2,) int32 and the attribute
//   rate: the dropout mask of element e keeps it where a 16-bit draw, hashed from
//   (seed, e), is at least round(rate 65536), and scales it by 65536 / (65536 - that).
//   The mask is a function of (seed, e), so the gradient draws it again instead of
//   keeping it; the gradient also rebuilds x + Dropout(s) from x and s.
// NativeResidualLayerNormGrad: -> dx (the LayerNorm's input gradient), ds (dx times the
//   mask), dgamma, dbeta.
// NativeSmoothedXent: the label-smoothed cross-entropy of each row of logits (5.4, 7.3)
//   logits (M, V), labels (M,) -> loss, nll, correct, lse (M,): lse = logsumexp(z),
//   nll = lse - z_y, loss = (1 - eps) nll + eps (lse - mean(z)), correct = 1 where z_y
//   is the row's largest logit (ties count).
// NativeSmoothedXentGrad: its gradient from lse, d_loss and d_nll (M,):
//   dz = (d_loss + d_nll) softmax(z) - eps / V d_loss, and at y also - ((1 - eps) d_loss
//   + d_nll). The softmax is recomputed from lse, so that no (M, V) tensor is kept
//   between the passes.
// TensorFlow's own ops make about ten passes over the (rows, d) tensors for the same
// work; these make one each way. Rows are split over the CPU worker threads; the column
// sums of the gradient are summed in fixed blocks of rows and then in block order, so
// that they do not depend on the number of threads.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

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

REGISTER_OP("NativeResidualLayerNorm")
    .Input("x: T")
    .Input("s: T")
    .Input("gamma: float")
    .Input("beta: float")
    .Input("seed: int32")
    .Output("y: T")
    .Output("mean: float")
    .Output("rstd: float")
    .Attr("epsilon: float")
    .Attr("rate: float")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn(ForwardShapes);

REGISTER_OP("NativeResidualLayerNormGrad")
    .Input("dy: T")
    .Input("x: T")
    .Input("s: T")
    .Input("gamma: float")
    .Input("mean: float")
    .Input("rstd: float")
    .Input("seed: int32")
    .Output("dx: T")
    .Output("ds: T")
    .Output("dgamma: float")
    .Output("dbeta: float")
    .Attr("rate: float")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(1));
      c->set_output(1, c->input(1));
      c->set_output(2, c->input(3));
      c->set_output(3, c->input(3));
      return absl::OkStatus();
    });

// ---------------------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------------------
// Storage types: float, or bfloat16 as its 16 bits (uint16_t); the arithmetic is float.
inline float ToFloat(float v) { return v; }
inline float ToFloat(uint16_t v) {
  const uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
inline void Store(float v, float* out) { *out = v; }
inline void Store(float v, uint16_t* out) {  // rounded to the nearest, ties to even
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  u = v != v ? 0x7fc00000U : u + 0x7fffU + ((u >> 16) & 1U);
  *out = static_cast<uint16_t>(u >> 16);
}

// One row h (d) normalized into y, with its mean and rstd.
template <typename S>
inline void NormalizeRow(const float* h, int64_t d, const float* g, const float* b, float eps,
                         S* y, float* mean, float* rstd) {
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
  for (int64_t j = 0; j < d; ++j) Store((h[j] - mu) * r * g[j] + b[j], y + j);
  *mean = mu;
  *rstd = r;
}

// The gradient of one row: dh (d) from dy and h, and its terms of the column sums
// (pg += dy n, pb += dy).
template <typename S>
inline void NormalizeRowGrad(const S* dy, const float* h, int64_t d, const float* g, float mu,
                             float r, float* pg, float* pb, float* dh) {
  const float inv_d = 1.0f / static_cast<float>(d);
  float sum_g = 0.0f, sum_gn = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gn)
  for (int64_t j = 0; j < d; ++j) {
    const float n = (h[j] - mu) * r;
    const float dyj = ToFloat(dy[j]);
    const float gj = dyj * g[j];
    sum_g += gj;
    sum_gn += gj * n;
    pg[j] += dyj * n;
    pb[j] += dyj;
  }
  const float mean_g = sum_g * inv_d, mean_gn = sum_gn * inv_d;
#pragma omp simd
  for (int64_t j = 0; j < d; ++j) {
    dh[j] = r * (ToFloat(dy[j]) * g[j] - mean_g - (h[j] - mu) * r * mean_gn);
  }
}

// A 32-bit mixing function (an invertible hash: xor-shifts and odd multipliers).
inline uint32_t Mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// The dropout multiplier of element e: 0 or scale, from a 16-bit draw keyed by the seed.
struct Dropout {
  uint32_t k0, k1, drop;
  float scale;
  Dropout(const Tensor& seed, float rate) {
    const int32_t* s = seed.flat<int32_t>().data();
    k0 = static_cast<uint32_t>(s[0]);
    k1 = static_cast<uint32_t>(s[1]) * 0x9e3779b9U;
    drop = static_cast<uint32_t>(std::lround(rate * 65536.0f));
    scale = 65536.0f / static_cast<float>(65536 - drop);
  }
  // h = x + s * mask over one row starting at element e0; the mask kept in m. (The
  // elements' 64-bit index: its low half is hashed with k0, its high half with k1.)
  template <typename S>
  inline void Row(const S* x, const S* s, int64_t d, uint64_t e0, float* h, float* m) const {
    const uint32_t key0 = k0, key1 = k1, threshold = drop;
    const float keep = scale;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) {
      const uint64_t e = e0 + static_cast<uint64_t>(j);
      const uint32_t draw =
          Mix(Mix(static_cast<uint32_t>(e) ^ key0) ^ key1 ^ static_cast<uint32_t>(e >> 32)) >> 16;
      m[j] = draw >= threshold ? keep : 0.0f;
      h[j] = ToFloat(x[j]) + ToFloat(s[j]) * m[j];
    }
  }
};

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

absl::Status CheckResidual(const Tensor& x, const Tensor& s, const Tensor& seed, float rate) {
  if (s.shape() != x.shape()) {
    return absl::InvalidArgumentError("NativeResidualLayerNorm: x and s differ in shape");
  }
  if (seed.NumElements() != 2) return absl::InvalidArgumentError("NativeResidualLayerNorm: seed must be (2,)");
  if (!(rate >= 0.0f && rate < 1.0f)) {
    return absl::InvalidArgumentError("NativeResidualLayerNorm: rate must be in [0, 1)");
  }
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

// A tensor's elements as the storage type S (float, or bfloat16's 16 bits).
template <typename S>
const S* Data(const Tensor& t) {
  return reinterpret_cast<const S*>(t.tensor_data().data());
}
template <typename S>
S* Data(Tensor* t) {
  return reinterpret_cast<S*>(const_cast<char*>(t->tensor_data().data()));
}

const float* In(OpKernelContext* ctx, int index) { return Data<float>(ctx->input(index)); }

float* Output(OpKernelContext* ctx, int index, const TensorShape& shape, absl::Status* status) {
  Tensor* t = nullptr;
  *status = ctx->allocate_output(index, shape, &t);
  return status->ok() ? Data<float>(t) : nullptr;
}

// y (of storage type S), mean and rstd of a forward kernel, allocated like x.
template <typename S>
struct ForwardOutputs {
  S* y = nullptr;
  float *mean = nullptr, *rstd = nullptr;
  absl::Status Allocate(OpKernelContext* ctx, const TensorShape& shape) {
    TensorShape rows = shape;
    rows.RemoveLastDims(1);
    Tensor *t0 = nullptr, *t1 = nullptr, *t2 = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(0, shape, &t0));
    TF_RETURN_IF_ERROR(ctx->allocate_output(1, rows, &t1));
    TF_RETURN_IF_ERROR(ctx->allocate_output(2, rows, &t2));
    y = Data<S>(t0);
    mean = Data<float>(t1);
    rstd = Data<float>(t2);
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
    ForwardOutputs<float> out;
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

template <typename S>
class NativeResidualLayerNormOp : public OpKernel {
 public:
  explicit NativeResidualLayerNormOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rate", &rate_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    int64_t rows = 0, d = 0;
    OP_REQUIRES_OK(ctx, CheckShapes(x, ctx->input(2), &rows, &d));
    OP_REQUIRES_OK(ctx, CheckResidual(x, ctx->input(1), ctx->input(4), rate_));
    OP_REQUIRES(ctx, ctx->input(3).NumElements() == d,
                absl::InvalidArgumentError("NativeResidualLayerNorm: beta must be (d,)"));
    ForwardOutputs<S> out;
    OP_REQUIRES_OK(ctx, out.Allocate(ctx, x.shape()));
    const S *xp = Data<S>(x), *sp = Data<S>(ctx->input(1));
    const float *g = In(ctx, 2), *b = In(ctx, 3);
    const Dropout dropout(ctx->input(4), rate_);
    ParallelRows(ctx, rows, 16 * d, [&](int64_t lo, int64_t hi) {
      std::vector<float> h(2 * d);
      for (int64_t i = lo; i < hi; ++i) {
        dropout.Row(xp + i * d, sp + i * d, d, static_cast<uint64_t>(i * d), h.data(),
                    h.data() + d);
        NormalizeRow(h.data(), d, g, b, epsilon_, out.y + i * d, out.mean + i, out.rstd + i);
      }
    });
  }

 private:
  float epsilon_, rate_;
};

template <typename S>
class NativeResidualLayerNormGradOp : public OpKernel {
 public:
  explicit NativeResidualLayerNormGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rate", &rate_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(1);
    const Tensor& gamma = ctx->input(3);
    int64_t rows = 0, d = 0;
    OP_REQUIRES_OK(ctx, CheckShapes(x, gamma, &rows, &d));
    OP_REQUIRES_OK(ctx, CheckResidual(x, ctx->input(2), ctx->input(6), rate_));
    OP_REQUIRES(ctx, ctx->input(0).shape() == x.shape(),
                absl::InvalidArgumentError("NativeResidualLayerNormGrad: dy and x differ in shape"));
    OP_REQUIRES(ctx, ctx->input(4).NumElements() == rows && ctx->input(5).NumElements() == rows,
                absl::InvalidArgumentError("NativeResidualLayerNormGrad: mean and rstd need one per row"));
    Tensor *dx = nullptr, *ds = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, x.shape(), &ds));
    absl::Status status;
    float* dgamma = Output(ctx, 2, gamma.shape(), &status);
    OP_REQUIRES_OK(ctx, status);
    float* dbeta = Output(ctx, 3, gamma.shape(), &status);
    OP_REQUIRES_OK(ctx, status);
    const S *dy = Data<S>(ctx->input(0)), *xp = Data<S>(x), *sp = Data<S>(ctx->input(2));
    const float *g = In(ctx, 3), *mean = In(ctx, 4), *rstd = In(ctx, 5);
    S *dxp = Data<S>(dx), *dsp = Data<S>(ds);
    const Dropout dropout(ctx->input(6), rate_);
    GradientRows(ctx, rows, d, dgamma, dbeta, [&](int64_t i, float* pg, float* pb) {
      thread_local std::vector<float> buffer;
      buffer.resize(3 * d);
      float *h = buffer.data(), *m = h + d, *dh = m + d;
      dropout.Row(xp + i * d, sp + i * d, d, static_cast<uint64_t>(i * d), h, m);
      NormalizeRowGrad(dy + i * d, h, d, g, mean[i], rstd[i], pg, pb, dh);
      S *dxr = dxp + i * d, *dsr = dsp + i * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) {
        Store(dh[j], dxr + j);
        Store(dh[j] * m[j], dsr + j);
      }
    });
  }

 private:
  float rate_;
};

REGISTER_KERNEL_BUILDER(Name("NativeLayerNorm").Device(tensorflow::DEVICE_CPU), NativeLayerNormOp);
REGISTER_KERNEL_BUILDER(Name("NativeLayerNormGrad").Device(tensorflow::DEVICE_CPU),
                        NativeLayerNormGradOp);
// ---------------------------------------------------------------------------------------
// The label-smoothed loss
// ---------------------------------------------------------------------------------------
REGISTER_OP("NativeSmoothedXent")
    .Input("logits: float")
    .Input("labels: int32")
    .Output("loss: float")
    .Output("nll: float")
    .Output("correct: float")
    .Output("lse: float")
    .Attr("epsilon: float")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle logits, rows;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &logits));
      TF_RETURN_IF_ERROR(c->Subshape(logits, 0, 1, &rows));
      for (int k = 0; k < 4; ++k) c->set_output(k, rows);
      return absl::OkStatus();
    });

REGISTER_OP("NativeSmoothedXentGrad")
    .Input("logits: float")
    .Input("labels: int32")
    .Input("lse: float")
    .Input("d_loss: float")
    .Input("d_nll: float")
    .Output("d_logits: float")
    .Attr("epsilon: float")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    });

// logits (M, V) and labels (M,) with every label in [0, V).
absl::Status CheckLogits(const Tensor& logits, const Tensor& labels, int64_t* rows,
                         int64_t* vocab) {
  if (logits.dims() != 2) return absl::InvalidArgumentError("NativeSmoothedXent: logits must be (M, V)");
  *rows = logits.dim_size(0);
  *vocab = logits.dim_size(1);
  if (labels.dims() != 1 || labels.dim_size(0) != *rows) {
    return absl::InvalidArgumentError("NativeSmoothedXent: labels must be (M,), one per row of logits");
  }
  const int32_t* y = labels.flat<int32_t>().data();
  for (int64_t i = 0; i < *rows; ++i) {
    if (y[i] < 0 || y[i] >= *vocab) {
      return absl::InvalidArgumentError("NativeSmoothedXent: a label is outside [0, V)");
    }
  }
  return absl::OkStatus();
}

// exp(x) for x <= 0 (a logit minus its row's maximum or logsumexp), in a form the
// compiler vectorizes: 2^n p(r) with n = x / ln 2 rounded, r = x - n ln 2 in [-ln2/2,
// ln2/2] (ln 2 in two parts), p the degree-6 Taylor polynomial of exp (relative error
// under 2e-7 there); 0 below -87 (float's smallest normal is exp(-87.3)).
inline float ExpNonPositive(float x) {
  x = x < -88.0f ? -88.0f : x;  // keeps n in int range; the result is 0 below -87 anyway
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round: 1.5 2^23
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return x < -87.0f ? 0.0f : p * scale;
}


class NativeSmoothedXentOp : public OpKernel {
 public:
  explicit NativeSmoothedXentOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& logits = ctx->input(0);
    const Tensor& labels = ctx->input(1);
    int64_t rows = 0, vocab = 0;
    OP_REQUIRES_OK(ctx, CheckLogits(logits, labels, &rows, &vocab));
    OP_REQUIRES(ctx, vocab > 0, absl::InvalidArgumentError("NativeSmoothedXent: V is 0"));
    float* out[4];
    for (int k = 0; k < 4; ++k) {
      Tensor* t = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(k, TensorShape({rows}), &t));
      out[k] = t->flat<float>().data();
    }
    const float* zp = logits.flat<float>().data();
    const int32_t* y = labels.flat<int32_t>().data();
    const float eps = epsilon_;
    const float inv_v = 1.0f / static_cast<float>(vocab);
    ParallelRows(ctx, rows, 12 * vocab, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const float* z = zp + i * vocab;
        float z_max = z[0];
#pragma omp simd reduction(max : z_max)
        for (int64_t j = 0; j < vocab; ++j) z_max = z[j] > z_max ? z[j] : z_max;
        float sum_exp = 0.0f, sum_z = 0.0f;
#pragma omp simd reduction(+ : sum_exp, sum_z)
        for (int64_t j = 0; j < vocab; ++j) {
          sum_exp += ExpNonPositive(z[j] - z_max);
          sum_z += z[j];
        }
        const float lse = z_max + std::log(sum_exp);
        const float z_y = z[y[i]];
        const float nll = lse - z_y;
        out[0][i] = (1.0f - eps) * nll + eps * (lse - sum_z * inv_v);
        out[1][i] = nll;
        out[2][i] = z_y >= z_max ? 1.0f : 0.0f;
        out[3][i] = lse;
      }
    });
  }

 private:
  float epsilon_;
};

class NativeSmoothedXentGradOp : public OpKernel {
 public:
  explicit NativeSmoothedXentGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& logits = ctx->input(0);
    const Tensor& labels = ctx->input(1);
    int64_t rows = 0, vocab = 0;
    OP_REQUIRES_OK(ctx, CheckLogits(logits, labels, &rows, &vocab));
    for (int k = 2; k < 5; ++k) {
      OP_REQUIRES(ctx, ctx->input(k).NumElements() == rows,
                  absl::InvalidArgumentError("NativeSmoothedXentGrad: lse, d_loss and d_nll need one per row"));
    }
    Tensor* d_logits = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, logits.shape(), &d_logits));
    const float* zp = logits.flat<float>().data();
    const int32_t* y = labels.flat<int32_t>().data();
    const float* lse = ctx->input(2).flat<float>().data();
    const float* d_loss = ctx->input(3).flat<float>().data();
    const float* d_nll = ctx->input(4).flat<float>().data();
    float* dzp = d_logits->flat<float>().data();
    const float eps = epsilon_;
    const float eps_v = eps / static_cast<float>(vocab);
    ParallelRows(ctx, rows, 12 * vocab, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const float* z = zp + i * vocab;
        float* dz = dzp + i * vocab;
        const float g = d_loss[i] + d_nll[i], shift = eps_v * d_loss[i], l = lse[i];
#pragma omp simd
        for (int64_t j = 0; j < vocab; ++j) dz[j] = ExpNonPositive(z[j] - l) * g - shift;
        dz[y[i]] -= (1.0f - eps) * d_loss[i] + d_nll[i];
      }
    });
  }

 private:
  float epsilon_;
};

#define REGISTER_RESIDUAL(T, S)                                                          \
  REGISTER_KERNEL_BUILDER(                                                                \
      Name("NativeResidualLayerNorm").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
      NativeResidualLayerNormOp<S>);                                                      \
  REGISTER_KERNEL_BUILDER(Name("NativeResidualLayerNormGrad")                             \
                              .Device(tensorflow::DEVICE_CPU)                             \
                              .TypeConstraint<T>("T"),                                    \
                          NativeResidualLayerNormGradOp<S>);
REGISTER_RESIDUAL(float, float)
REGISTER_RESIDUAL(tensorflow::bfloat16, uint16_t)
REGISTER_KERNEL_BUILDER(Name("NativeSmoothedXent").Device(tensorflow::DEVICE_CPU),
                        NativeSmoothedXentOp);
REGISTER_KERNEL_BUILDER(Name("NativeSmoothedXentGrad").Device(tensorflow::DEVICE_CPU),
                        NativeSmoothedXentGradOp);

}  // namespace
