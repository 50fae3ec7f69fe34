// GoogleTest main for MPI tests (pattern of LLNL gtest-mpi-listener): every rank runs every
// test; each test's verdict is AND-reduced over ranks so rank 0 reports failures from any
// rank; only rank 0 prints. Exit code is non-zero on every rank if any rank failed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

namespace {

class MpiVerdictListener : public testing::EmptyTestEventListener {
 public:
  explicit MpiVerdictListener(int rank) : rank_(rank) {}
  void OnTestEnd(const testing::TestInfo& info) override {
    int ok = info.result()->Failed() ? 0 : 1;  // a skipped test is not a failure
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (!ok) std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    if (!all_ok) any_failed_ = true;
  }
  bool any_failed() const { return any_failed_; }

 private:
  int rank_;
  bool any_failed_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto& listeners = testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  auto* verdict = new MpiVerdictListener(rank);  // owned by googletest after Append
  listeners.Append(verdict);
  const int local = RUN_ALL_TESTS();
  const bool failed = verdict->any_failed() || local != 0;
  MPI_Finalize();
  return failed ? 1 : 0;
}
