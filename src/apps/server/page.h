// The chat page served at `/`: files under src/apps/server/page/, embedded into the binary at
// build time (cmake/embed_files.cmake writes the table page_files() returns), so the page needs
// nothing installed and works offline.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

namespace inkling::server {

struct EmbeddedFile {
  const char* name;  // relative to the page folder: "index.html", "app.js"
  const char* data;
  size_t size;
  std::string_view body() const { return {data, size}; }
};

std::span<const EmbeddedFile> page_files();

// The file a GET path names: "/" is index.html, "/page/NAME" is NAME; nullptr for anything else.
const EmbeddedFile* page_file_for(std::string_view path);
// Whether a path belongs to the page (public even with --api-key: the API behind it is not).
bool is_page_path(std::string_view path);
// The Content-Type of a page file, from its extension.
const char* page_content_type(std::string_view name);
// Sent with every page file: scripts and styles from this server only, no inline script, no
// remote origin, no framing.
inline constexpr const char* kPageSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

}  // namespace inkling::server
