#include "tests/support/reference.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace detcoll::testing {
namespace {

float loadAsFloat(const void* data, size_t i, DataType type) {
  if (type == DataType::kFloat16) {
    _Float16 h;
    std::memcpy(&h, static_cast<const char*>(data) + 2 * i, 2);
    return static_cast<float>(h);
  }
  uint16_t b;
  std::memcpy(&b, static_cast<const char*>(data) + 2 * i, 2);
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t bfloat16Bits(float f) {
  if (std::isnan(f)) return 0x7fc0;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t low = u & 0xffff0000u;
  const uint32_t high = low + 0x10000u;  // the next bfloat16 away from zero
  float lf, hf;
  std::memcpy(&lf, &low, 4);
  std::memcpy(&hf, &high, 4);
  const double dl = std::fabs(static_cast<double>(f) - lf);
  const double dh = std::isinf(hf) ? std::ldexp(1.0, 128) - std::fabs(static_cast<double>(f))
                                   : std::fabs(static_cast<double>(hf) - f);
  // Beyond the largest finite bfloat16, the rounding boundary is where 2^128 would be.
  bool up = dh < dl || (dh == dl && ((low >> 16) & 1u));
  if (std::isinf(hf) && std::isinf(lf)) up = false;
  return static_cast<uint16_t>((up ? high : low) >> 16);
}

template <typename A>
A pick(A a, A b, bool isMin) {
  if constexpr (std::is_floating_point_v<A>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<A>::quiet_NaN();
    if (a == b) {
      const bool aNegative = std::signbit(a);
      return (aNegative == isMin) ? a : b;
    }
  }
  return isMin ? (a < b ? a : b) : (a > b ? a : b);
}

template <typename A>
A combine(A a, A b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      if constexpr (std::is_integral_v<A>) {
        return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
      } else {
        return a + b;
      }
    case ReduceOp::kMin:
      return pick(a, b, true);
    case ReduceOp::kMax:
      return pick(a, b, false);
  }
  return a;
}

template <typename A, typename Load, typename Store>
void foldWith(size_t count, const std::vector<int>& order, ReduceOp op, int64_t divisor, Load load,
              Store store) {
  for (size_t i = 0; i < count; ++i) {
    A acc = load(order[0], i);
    for (size_t k = 1; k < order.size(); ++k) acc = combine<A>(acc, load(order[k], i), op);
    if (op == ReduceOp::kAverage) acc = acc / static_cast<A>(divisor);
    store(i, acc);
  }
}

void foldInOrder(void* out, const std::vector<const void*>& in, size_t count, DataType type,
                 ReduceOp op, int64_t divisor, const std::vector<int>& order) {
  auto at = [&](int r) { return static_cast<const char*>(in[r]); };
  char* o = static_cast<char*>(out);
  switch (type) {
    case DataType::kFloat32:
      return foldWith<float>(
          count, order, op, divisor,
          [&](int r, size_t i) {
            float v;
            std::memcpy(&v, at(r) + 4 * i, 4);
            return v;
          },
          [&](size_t i, float a) {
            if (std::isnan(a)) a = std::numeric_limits<float>::quiet_NaN();
            std::memcpy(o + 4 * i, &a, 4);
          });
    case DataType::kFloat64:
      return foldWith<double>(
          count, order, op, divisor,
          [&](int r, size_t i) {
            double v;
            std::memcpy(&v, at(r) + 8 * i, 8);
            return v;
          },
          [&](size_t i, double a) {
            if (std::isnan(a)) a = std::numeric_limits<double>::quiet_NaN();
            std::memcpy(o + 8 * i, &a, 8);
          });
    case DataType::kFloat16:
      return foldWith<float>(
          count, order, op, divisor, [&](int r, size_t i) { return loadAsFloat(in[r], i, type); },
          [&](size_t i, float a) {
            uint16_t bits = 0x7e00;
            if (!std::isnan(a)) {
              const _Float16 h = static_cast<_Float16>(a);
              std::memcpy(&bits, &h, 2);
            }
            std::memcpy(o + 2 * i, &bits, 2);
          });
    case DataType::kBFloat16:
      return foldWith<float>(
          count, order, op, divisor, [&](int r, size_t i) { return loadAsFloat(in[r], i, type); },
          [&](size_t i, float a) {
            const uint16_t bits = bfloat16Bits(a);
            std::memcpy(o + 2 * i, &bits, 2);
          });
    case DataType::kInt32:
      return foldWith<int64_t>(
          count, order, op, divisor,
          [&](int r, size_t i) {
            int32_t v;
            std::memcpy(&v, at(r) + 4 * i, 4);
            return static_cast<int64_t>(v);
          },
          [&](size_t i, int64_t a) {
            const int32_t v = static_cast<int32_t>(static_cast<uint32_t>(a));
            std::memcpy(o + 4 * i, &v, 4);
          });
    case DataType::kInt64:
      return foldWith<int64_t>(
          count, order, op, divisor,
          [&](int r, size_t i) {
            int64_t v;
            std::memcpy(&v, at(r) + 8 * i, 8);
            return v;
          },
          [&](size_t i, int64_t a) { std::memcpy(o + 8 * i, &a, 8); });
  }
}

}  // namespace

void referenceFold(void* out, const std::vector<const void*>& inputs, size_t count, DataType type,
                   ReduceOp op, int64_t divisor) {
  rotatedFold(out, inputs, count, type, op, divisor, 0);
}

void rotatedFold(void* out, const std::vector<const void*>& inputs, size_t count, DataType type,
                 ReduceOp op, int64_t divisor, int start) {
  std::vector<int> order;
  const int p = static_cast<int>(inputs.size());
  for (int k = 0; k < p; ++k) order.push_back((start + k) % p);
  foldInOrder(out, inputs, count, type, op, divisor, order);
}

std::vector<uint8_t> randomBuffer(DataType type, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::bernoulli_distribution negative(0.5);
  const int range = type == DataType::kFloat16 ? 8 : 20;
  std::uniform_int_distribution<int> exponent(-range, range - 1);
  std::uniform_int_distribution<int64_t> integer(-(int64_t{1} << 20), int64_t{1} << 20);
  std::vector<uint8_t> out(count * dataTypeSize(type));
  for (size_t i = 0; i < count; ++i) {
    double v = std::ldexp(mantissa(rng), exponent(rng));
    if (negative(rng)) v = -v;
    char* slot = reinterpret_cast<char*>(out.data()) + i * dataTypeSize(type);
    switch (type) {
      case DataType::kFloat32: {
        const float f = static_cast<float>(v);
        std::memcpy(slot, &f, 4);
        break;
      }
      case DataType::kFloat64:
        std::memcpy(slot, &v, 8);
        break;
      case DataType::kFloat16: {
        const _Float16 h = static_cast<_Float16>(static_cast<float>(v));
        std::memcpy(slot, &h, 2);
        break;
      }
      case DataType::kBFloat16: {
        const uint16_t b = bfloat16Bits(static_cast<float>(v));
        std::memcpy(slot, &b, 2);
        break;
      }
      case DataType::kInt32: {
        const int32_t n = static_cast<int32_t>(integer(rng));
        std::memcpy(slot, &n, 4);
        break;
      }
      case DataType::kInt64: {
        const int64_t n = integer(rng) * (int64_t{1} << 30);
        std::memcpy(slot, &n, 8);
        break;
      }
    }
  }
  return out;
}

long firstDifference(const void* a, const void* b, size_t count, DataType type) {
  const size_t es = dataTypeSize(type);
  const char* x = static_cast<const char*>(a);
  const char* y = static_cast<const char*>(b);
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(x + i * es, y + i * es, es) != 0) return static_cast<long>(i);
  }
  return -1;
}

double elementAsDouble(const void* data, size_t i, DataType type) {
  const char* p = static_cast<const char*>(data) + i * dataTypeSize(type);
  switch (type) {
    case DataType::kFloat32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DataType::kFloat64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return loadAsFloat(data, i, type);
    case DataType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DataType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
  }
  return 0;
}

std::string describeElement(const void* data, size_t i, DataType type) {
  const char* p = static_cast<const char*>(data) + i * dataTypeSize(type);
  switch (type) {
    case DataType::kFloat32: {
      float v;
      std::memcpy(&v, p, 4);
      char text[64];
      std::snprintf(text, sizeof(text), "%.9g (%a)", v, v);
      return text;
    }
    case DataType::kFloat64: {
      double v;
      std::memcpy(&v, p, 8);
      char text[64];
      std::snprintf(text, sizeof(text), "%.17g (%a)", v, v);
      return text;
    }
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      uint16_t bits;
      std::memcpy(&bits, p, 2);
      char text[64];
      std::snprintf(text, sizeof(text), "%.6g (0x%04x)", loadAsFloat(data, i, type), bits);
      return text;
    }
    case DataType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return std::to_string(v);
    }
    case DataType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return std::to_string(v);
    }
  }
  return "?";
}

}  // namespace detcoll::testing
