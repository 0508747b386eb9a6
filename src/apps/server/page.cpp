#include "apps/server/page.h"

namespace inkling::server {

const EmbeddedFile* page_file_for(std::string_view path) {
  std::string_view name;
  if (path == "/") name = "index.html";
  else if (path.starts_with("/page/")) name = path.substr(6);
  else return nullptr;
  for (const EmbeddedFile& file : page_files())
    if (name == file.name) return &file;
  return nullptr;
}

bool is_page_path(std::string_view path) { return path == "/" || path.starts_with("/page/"); }

const char* page_content_type(std::string_view name) {
  auto ends = [&](std::string_view suffix) { return name.ends_with(suffix); };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".json")) return "application/json";
  return "application/octet-stream";
}

}  // namespace inkling::server
