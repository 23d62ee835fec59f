#include "store/store.h"

#include "store/store_internal.h"

namespace ablate::server {

// ---- Store --------------------------------------------------------------------------------------

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Store::~Store() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->work_cv.notify_all();
  impl_->space_cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
  // Readers first: the last connection to close checkpoints and removes the WAL.
  impl_->pool.Clear();
  impl_->writer.reset();
}

StatusOr<std::unique_ptr<Store>> Store::Open(const Options& options) {
  Options opt = options;
  if (opt.path.empty()) return InvalidArgument("store: Options::path is empty");
  if (opt.path == ":memory:" || opt.path.rfind("file::memory:", 0) == 0) {
    return InvalidArgument(
        "store: an in-memory database is not supported (WAL and a read pool "
        "need a file); use a temporary file");
  }
  if (opt.max_batch_ops < 1) return InvalidArgument("store: max_batch_ops must be >= 1");
  if (opt.max_batch_points < 1) return InvalidArgument("store: max_batch_points must be >= 1");
  if (opt.read_connections < 1) return InvalidArgument("store: read_connections must be >= 1");
  if (opt.query_max_rows < 1) return InvalidArgument("store: query_max_rows must be >= 1");
  if (opt.clock == nullptr) opt.clock = SystemClock();

  auto wdb_or = OpenWriter(opt);
  if (!wdb_or.ok()) return wdb_or.status().WithPrefix("open " + opt.path);
  std::unique_ptr<Db> wdb = std::move(wdb_or).value();

  auto impl = std::make_unique<Impl>();
  for (int i = 0; i < opt.read_connections; ++i) {
    ABLATE_ASSIGN_OR_RETURN(std::unique_ptr<Db> rdb, Db::Open(opt.path, SQLITE_OPEN_READONLY));
    sqlite3_busy_timeout(rdb->raw(), opt.busy_timeout_ms);
    ABLATE_RETURN_IF_ERROR(
        rdb->Exec("PRAGMA query_only=1; PRAGMA cache_size=-16384;").WithPrefix("open " + opt.path));
    impl->pool.Add(std::move(rdb));
  }
  impl->writer = std::make_unique<Writer>(std::move(wdb), opt.clock);
  impl->opt = std::move(opt);
  Impl* raw = impl.get();
  std::promise<std::thread::id> started;
  auto started_f = started.get_future();
  impl->thread = std::thread([raw, &started] {
    started.set_value(std::this_thread::get_id());
    raw->Run();
  });
  impl->writer_id = started_f.get();
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

}  // namespace ablate::server
