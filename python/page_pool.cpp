// python/page_pool.cpp — PyPagePool (paged.hpp): the NumPy K/V page pools (wrapped or allocated), their checks,
// and the locked counters of kvevict::PagePool.
// SPDX-License-Identifier: Apache-2.0
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "paged.hpp"

namespace kvpy {

namespace {

const char* const kSizeNames[] = {"num_pages", "page_size", "n_kv_heads", "head_dim"};

kvevict::PageLayout to_layout(py::handle o) {
  const std::string s = to_text(o, "layout");
  if (s == "NHD") return kvevict::PageLayout::NHD;
  if (s == "HND") return kvevict::PageLayout::HND;
  throw py::value_error("layout must be 'NHD' or 'HND' (got '" + s + "')");
}

}  // namespace

PyPagePool::PyPagePool(py::object k, py::object v, const Options& o) {
  layout_ = to_layout(o.get("layout"));
  if (k.is_none()) k = py::object();
  if (v.is_none()) v = py::object();
  if (k || v)
    wrap(k, v, o);
  else
    allocate(o);
}

const char* PyPagePool::shape_text() const {
  return layout_ == kvevict::PageLayout::NHD ? "[num_pages, page_size, n_kv_heads, head_dim]"
                                             : "[num_pages, n_kv_heads, page_size, head_dim]";
}

void PyPagePool::wrap(py::object k, py::object v, const Options& o) {
  if (!k || !v)
    throw py::value_error("give both k and v to wrap caller page pools (got only " + std::string(k ? "k" : "v") + ")");
  for (const char* key : kSizeNames)
    if (o.has(key))
      throw py::value_error(std::string(key) + " is taken from the shape of k when wrapping k and v; do not pass it");
  const std::string layout = std::string(" (layout ") + kvevict::page_layout_name(layout_) + ")";
  const std::string expected = std::string("a C-contiguous float32 or float16 array of shape ") + shape_text() + layout;
  const py::array ka = as_array(k, "k", expected);
  if (ka.ndim() != 4) throw py::value_error("k must be " + expected + ", got shape " + array_shape(ka));
  if (has_elem(ka, Elem::float16))
    dtype_ = DType::float16;
  else if (has_elem(ka, Elem::float32))
    dtype_ = DType::float32;
  else
    throw py::value_error("k must be " + expected + ", got " + dtype_text(ka));
  if (o.has("dtype") && to_dtype(o.get("dtype")) != dtype_)
    throw py::value_error(std::string("dtype = ") + dtype_name(to_dtype(o.get("dtype"))) + " but k is " +
                          dtype_name(dtype_));
  const bool nhd = layout_ == kvevict::PageLayout::NHD;
  num_pages_ = static_cast<std::size_t>(ka.shape(0));
  page_size_ = static_cast<std::size_t>(ka.shape(nhd ? 1 : 2));
  n_kv_heads_ = static_cast<std::size_t>(ka.shape(nhd ? 2 : 1));
  head_dim_ = static_cast<std::size_t>(ka.shape(3));
  const std::vector<py::ssize_t> shape{ka.shape(0), ka.shape(1), ka.shape(2), ka.shape(3)};
  k_ = checked_array(k, "k", elem_of(dtype_), shape, shape_text() + layout, true);
  v_ = checked_array(v, "v", elem_of(dtype_), shape, shape_text() + layout + " (the shape of k)", true);
  // Zero dimensions first: two zero-size arrays can share an address without sharing an element.
  if (num_pages_ == 0 || page_size_ == 0 || n_kv_heads_ == 0 || head_dim_ == 0)
    throw py::value_error("k must have no zero dimension, got shape " + array_shape(k_));
  require_disjoint(k_, v_);
  pool_ = std::make_unique<kvevict::PagePool>(num_pages_);  // ValueError above 2^31 - 1 pages
  k_ptr_ = k_.mutable_data();
  v_ptr_ = v_.mutable_data();
}

void PyPagePool::allocate(const Options& o) {
  for (const char* key : kSizeNames)
    if (!o.has(key))
      throw py::value_error(std::string("give num_pages, page_size, n_kv_heads and head_dim (a pool of its own) or "
                                        "k and v (caller arrays); ") + key + " is missing");
  std::size_t* sizes[] = {&num_pages_, &page_size_, &n_kv_heads_, &head_dim_};
  for (int i = 0; i < 4; ++i) {
    *sizes[i] = to_size(o.get(kSizeNames[i]), kSizeNames[i]);
    if (*sizes[i] == 0) throw py::value_error(std::string(kSizeNames[i]) + " must be >= 1 (got 0)");
  }
  dtype_ = o.has("dtype") ? to_dtype(o.get("dtype")) : DType::float32;
  std::size_t elements = 0;
  if (__builtin_mul_overflow(num_pages_, page_size_, &elements) ||
      __builtin_mul_overflow(elements, n_kv_heads_, &elements) ||
      __builtin_mul_overflow(elements, head_dim_, &elements) ||
      elements > static_cast<std::size_t>(PTRDIFF_MAX) / 8)
    throw py::value_error("num_pages * page_size * n_kv_heads * head_dim = " + std::to_string(num_pages_) + " * " +
                          std::to_string(page_size_) + " * " + std::to_string(n_kv_heads_) + " * " +
                          std::to_string(head_dim_) + " is too large for an array");
  pool_ = std::make_unique<kvevict::PagePool>(num_pages_);  // ValueError above 2^31 - 1 pages, before allocating
  const bool nhd = layout_ == kvevict::PageLayout::NHD;
  const py::tuple shape = py::make_tuple(num_pages_, nhd ? page_size_ : n_kv_heads_, nhd ? n_kv_heads_ : page_size_,
                                         head_dim_);
  const py::object zeros = py::module_::import("numpy").attr("zeros");
  k_ = zeros(shape, dtype_name(dtype_));
  v_ = zeros(shape, dtype_name(dtype_));
  k_ptr_ = k_.mutable_data();
  v_ptr_ = v_.mutable_data();
}

std::size_t PyPagePool::used_pages() {
  GilFreeLock lock(mutex_);
  return pool_->used_pages();
}
std::size_t PyPagePool::free_pages() {
  GilFreeLock lock(mutex_);
  return pool_->free_pages();
}
std::size_t PyPagePool::pages_released() {
  GilFreeLock lock(mutex_);
  return pool_->pages_released();
}
bool PyPagePool::in_use(py::handle page) {
  const std::int64_t p = to_i64(page, "page");
  if (p < 0 || static_cast<std::uint64_t>(p) >= num_pages_)
    throw py::index_error("kvevict.PagePool.in_use: page " + std::to_string(p) + " is outside [0, " +
                          std::to_string(num_pages_) + ")");
  GilFreeLock lock(mutex_);
  return pool_->in_use(static_cast<std::int32_t>(p));
}

std::string PyPagePool::describe() {
  std::ostringstream os;
  os << "kvevict.PagePool(num_pages=" << num_pages_ << ", page_size=" << page_size_ << ", n_kv_heads=" << n_kv_heads_
     << ", head_dim=" << head_dim_ << ", layout='" << kvevict::page_layout_name(layout_)
     << "', dtype=" << dtype_name(dtype_) << ", used_pages=" << used_pages() << ")";
  return os.str();
}

}  // namespace kvpy
