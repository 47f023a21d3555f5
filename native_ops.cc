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
// TensorFlow's own ops make about ten passes over the (rows, d) tensors for the same
// work; these make one each way. Rows are split over the CPU worker threads; the column
// sums of the gradient are summed in fixed blocks of rows and then in block order, so
// that they do not depend on the number of threads.

#include <algorithm>
#include <cmath>
#include <cstdint>
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

absl::Status RowsShape(InferenceContext* c, ShapeHandle* rows) {
  ShapeHandle x;
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &x));
  return c->Subshape(x, 0, -1, rows);
}

REGISTER_OP("NativeLayerNorm")
    .Input("x: float")
    .Input("gamma: float")
    .Input("beta: float")
    .Output("y: float")
    .Output("mean: float")
    .Output("rstd: float")
    .Attr("epsilon: float")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle rows;
      TF_RETURN_IF_ERROR(RowsShape(c, &rows));
      c->set_output(0, c->input(0));
      c->set_output(1, rows);
      c->set_output(2, rows);
      return absl::OkStatus();
    });

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

// The checks both kernels make: x at least 1-D, gamma (and beta) of its last dimension.
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

class NativeLayerNormOp : public OpKernel {
 public:
  explicit NativeLayerNormOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& gamma = ctx->input(1);
    int64_t rows = 0, d = 0;
    OP_REQUIRES_OK(ctx, CheckShapes(x, gamma, &rows, &d));
    OP_REQUIRES(ctx, ctx->input(2).NumElements() == d,
                absl::InvalidArgumentError("NativeLayerNorm: beta must be (d,)"));
    TensorShape row_shape = x.shape();
    row_shape.RemoveLastDims(1);
    Tensor *y = nullptr, *mean = nullptr, *rstd = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, row_shape, &mean));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, row_shape, &rstd));
    if (rows == 0 || d == 0) return;
    const float* xp = x.flat<float>().data();
    const float* g = gamma.flat<float>().data();
    const float* b = ctx->input(2).flat<float>().data();
    float* yp = y->flat<float>().data();
    float* mp = mean->flat<float>().data();
    float* rp = rstd->flat<float>().data();
    const float eps = epsilon_;
    const float inv_d = 1.0f / static_cast<float>(d);
    ParallelRows(ctx, rows, 8 * d, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const float* xr = xp + i * d;
        float* yr = yp + i * d;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < d; ++j) sum += xr[j];
        const float mu = sum * inv_d;
        float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
        for (int64_t j = 0; j < d; ++j) sq += (xr[j] - mu) * (xr[j] - mu);
        const float r = 1.0f / std::sqrt(sq * inv_d + eps);
        mp[i] = mu;
        rp[i] = r;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - mu) * r * g[j] + b[j];
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
    const Tensor& dy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    const Tensor& gamma = ctx->input(2);
    int64_t rows = 0, d = 0;
    OP_REQUIRES_OK(ctx, CheckShapes(x, gamma, &rows, &d));
    OP_REQUIRES(ctx, dy.shape() == x.shape(),
                absl::InvalidArgumentError("NativeLayerNormGrad: dy and x differ in shape"));
    OP_REQUIRES(ctx, ctx->input(3).NumElements() == rows && ctx->input(4).NumElements() == rows,
                absl::InvalidArgumentError("NativeLayerNormGrad: mean and rstd need one per row"));
    Tensor *dx = nullptr, *dgamma = nullptr, *dbeta = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, gamma.shape(), &dgamma));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, gamma.shape(), &dbeta));
    float* dgp = dgamma->flat<float>().data();
    float* dbp = dbeta->flat<float>().data();
    std::fill(dgp, dgp + d, 0.0f);
    std::fill(dbp, dbp + d, 0.0f);
    if (rows == 0 || d == 0) return;
    const float* dyp = dy.flat<float>().data();
    const float* xp = x.flat<float>().data();
    const float* g = gamma.flat<float>().data();
    const float* mp = ctx->input(3).flat<float>().data();
    const float* rp = ctx->input(4).flat<float>().data();
    float* dxp = dx->flat<float>().data();
    const float inv_d = 1.0f / static_cast<float>(d);
    const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
    std::vector<float> partial(2 * blocks * d, 0.0f);  // per block: dgamma, then dbeta
    ParallelRows(ctx, blocks, 10 * d * kBlockRows, [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k) {
        float* pg = partial.data() + 2 * k * d;
        float* pb = pg + d;
        const int64_t end = std::min(rows, (k + 1) * kBlockRows);
        for (int64_t i = k * kBlockRows; i < end; ++i) {
          const float* dyr = dyp + i * d;
          const float* xr = xp + i * d;
          float* dxr = dxp + i * d;
          const float mu = mp[i], r = rp[i];
          float sum_g = 0.0f, sum_gn = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gn)
          for (int64_t j = 0; j < d; ++j) {
            const float n = (xr[j] - mu) * r;
            const float gj = dyr[j] * g[j];
            sum_g += gj;
            sum_gn += gj * n;
            pg[j] += dyr[j] * n;
            pb[j] += dyr[j];
          }
          const float mean_g = sum_g * inv_d, mean_gn = sum_gn * inv_d;
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) {
            const float n = (xr[j] - mu) * r;
            dxr[j] = r * (dyr[j] * g[j] - mean_g - n * mean_gn);
          }
        }
      }
    });
    for (int64_t k = 0; k < blocks; ++k) {
      const float* pg = partial.data() + 2 * k * d;
      const float* pb = pg + d;
      for (int64_t j = 0; j < d; ++j) {
        dgp[j] += pg[j];
        dbp[j] += pb[j];
      }
    }
  }
};

REGISTER_KERNEL_BUILDER(Name("NativeLayerNorm").Device(tensorflow::DEVICE_CPU), NativeLayerNormOp);
REGISTER_KERNEL_BUILDER(Name("NativeLayerNormGrad").Device(tensorflow::DEVICE_CPU),
                        NativeLayerNormGradOp);

}  // namespace
