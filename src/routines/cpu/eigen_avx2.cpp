// The Eigen 3.4 calls of cpu/eigen (eigen.cpp), the one file built with
// -mavx2 -mfma and the only one that includes Eigen: plain types in its
// interface, so no inline function of the project is compiled here with AVX2
// (the linker could otherwise pick that copy for code that runs without it).
#define EIGEN_DONT_PARALLELIZE
#define EIGEN_NO_DEBUG

#include <Eigen/Core>

#include <cstdint>

namespace softneuro::cpu::eigen_avx2 {

using Index = Eigen::Index;
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

namespace {
/// Eigen's GEMM blocking over packing buffers we own.
class WorkspaceBlocking final : public Eigen::internal::level3_blocking<float, float> {
 public:
  WorkspaceBlocking(float* a, float* b, Index mc, Index nc, Index kc) {
    this->m_blockA = a;
    this->m_blockB = b;
    this->m_mc = mc;
    this->m_nc = nc;
    this->m_kc = kc;
  }
};
}  // namespace

void blocking_sizes(int64_t& kc, int64_t& mc, int64_t& nc) {
  Index k = kc, m = mc, n = nc;
  Eigen::internal::computeProductBlockingSizes<float, float, 1, Index>(k, m, n, Index(1));
  kc = k;
  mc = m;
  nc = n;
}

void gemv(const float* w, const float* x, float* y, int64_t no, int64_t k) {
  Eigen::Map<const RowMat> wb(w, no, k);
  Eigen::Map<const Eigen::VectorXf> xv(x, k);
  Eigen::Map<Eigen::VectorXf> yv(y, no);
  yv.noalias() += wb * xv;
}

void gemm(int64_t nr, int64_t no, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw, float* y,
          int64_t ldy, float* block_a, float* block_b, int64_t kc, int64_t mc, int64_t nc) {
  WorkspaceBlocking blocking(block_a, block_b, mc, nc, kc);
  // Y[nr, no] (row-major) += X[nr, k] (row-major) · Wᵀ, Wᵀ = W[no, k] read column-major.
  Eigen::internal::general_matrix_matrix_product<Index, float, Eigen::RowMajor, false, float, Eigen::ColMajor, false,
                                                 Eigen::RowMajor, 1>::run(nr, no, k, x, ldx, w, ldw, y, 1, ldy, 1.0f,
                                                                          blocking, nullptr);
}

}  // namespace softneuro::cpu::eigen_avx2
