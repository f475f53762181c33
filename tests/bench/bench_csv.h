// The benchmarks' CSV output (-C FILE): one row per line of their tables, written by rank 0.
//
// The file is opened for appending, so several runs (dtypes, modes, world sizes) collect into one
// file; the header is written when the file is new or empty. A file that already starts with
// another header (another benchmark's CSV) is refused rather than mixed.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

namespace detcoll::bench {

class CsvFile {
 public:
  CsvFile() = default;
  CsvFile(const CsvFile&) = delete;
  CsvFile& operator=(const CsvFile&) = delete;
  ~CsvFile() {
    if (file_ != nullptr) std::fclose(file_);
  }

  // Opens path for appending and writes header (the column names, comma-separated, no newline)
  // if the file is empty. False, with *error set, if it cannot be opened or holds other columns.
  bool open(const std::string& path, const std::string& header, std::string* error) {
    if (std::FILE* existing = std::fopen(path.c_str(), "r")) {
      std::string first;
      for (int c = std::fgetc(existing); c != EOF && c != '\n'; c = std::fgetc(existing)) {
        first.push_back(static_cast<char>(c));
      }
      std::fclose(existing);
      if (!first.empty() && first != header) {
        *error = "CSV file '" + path + "' has other columns: '" + first + "'; expected '" + header +
                 "' (write this benchmark's rows to another file)";
        return false;
      }
    }
    file_ = std::fopen(path.c_str(), "a");
    if (file_ == nullptr) {
      *error = "cannot open the CSV file '" + path + "' for appending";
      return false;
    }
    std::fseek(file_, 0, SEEK_END);
    if (std::ftell(file_) == 0) std::fprintf(file_, "%s\n", header.c_str());
    std::fflush(file_);
    return true;
  }

  bool isOpen() const { return file_ != nullptr; }

  // One row, printf-style, newline added; flushed, so an interrupted run keeps its rows.
  __attribute__((format(printf, 2, 3))) void row(const char* format, ...) {
    if (file_ == nullptr) return;
    va_list args;
    va_start(args, format);
    std::vfprintf(file_, format, args);
    va_end(args);
    std::fputc('\n', file_);
    std::fflush(file_);
  }

 private:
  std::FILE* file_ = nullptr;
};

}  // namespace detcoll::bench
