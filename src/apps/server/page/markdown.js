// Markdown to DOM nodes, for the model's answers. The input is untrusted text: nothing here
// parses HTML; every piece of it ends up in a text node or an attribute set through the DOM
// (links only for http, https and mailto). Covers what chat answers use: paragraphs, headings,
// lists (nested, ordered), block quotes, fenced code, tables, rules; inline code, emphasis,
// strong, strikethrough, links and bare URLs. A half-written answer renders too (an open code
// fence runs to the end), so a stream can be re-rendered as it grows.

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( *)([-*+]|\d{1,9}[.)])(?:\s+(.*)|$)/;
const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;
const URL_START = /^https?:\/\/[^\s<>"'`]+/i;

function el(tag, className) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  return node;
}

export function safeUrl(url) {
  const trimmed = url.trim();
  return /^(https?:|mailto:)/i.test(trimmed) ? trimmed : null;
}

function link(href, parent) {
  const a = el("a");
  a.href = href;
  a.target = "_blank";
  a.rel = "noopener noreferrer";
  parent.appendChild(a);
  return a;
}

function isBlank(line) {
  return /^\s*$/.test(line);
}

function tableCells(line) {
  let s = line.trim();
  if (s.startsWith("|")) s = s.slice(1);
  if (s.endsWith("|") && !s.endsWith("\\|")) s = s.slice(0, -1);
  const cells = [];
  let cell = "";
  for (let i = 0; i < s.length; i++) {
    if (s[i] === "\\" && s[i + 1] === "|") {
      cell += "|";
      i++;
    } else if (s[i] === "|") {
      cells.push(cell.trim());
      cell = "";
    } else {
      cell += s[i];
    }
  }
  cells.push(cell.trim());
  return cells;
}

function startsTable(lines, i) {
  return i + 1 < lines.length && lines[i].includes("|") && TABLE_RULE.test(lines[i + 1]) && lines[i + 1].includes("-");
}

// Whether line i starts a block other than a paragraph (so a paragraph ends before it).
function startsBlock(lines, i) {
  const line = lines[i];
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) ||
    (ITEM.test(line) && ITEM.exec(line)[3] !== undefined) || startsTable(lines, i);
}

// ---- inline ----------------------------------------------------------------------------------

function isWordChar(c) {
  return c !== undefined && /[\p{L}\p{N}]/u.test(c);
}

// Where the closing `delim` of an emphasis opened at `from` is, or -1.
function findCloser(text, from, delim) {
  for (let j = from; j <= text.length - delim.length; j++) {
    if (text[j] === "\\") {
      j++;
      continue;
    }
    if (text[j] === "`") {  // code spans are opaque to emphasis
      const run = /^`+/.exec(text.slice(j))[0];
      const end = text.indexOf(run, j + run.length);
      if (end > 0) j = end + run.length - 1;
      continue;
    }
    if (delim.length === 1 && text[j] === delim && text[j + 1] === delim) {  // a longer run: not this closer
      while (text[j + 1] === delim) j++;
      continue;
    }
    if (text.startsWith(delim, j) && j > from && !/\s/.test(text[j - 1])) {
      if (delim[0] === "_" && isWordChar(text[j + delim.length])) continue;
      return j;
    }
  }
  return -1;
}

// Index of the bracket closing the "[" at `open`, or -1.
function closingBracket(text, open) {
  let depth = 0;
  for (let j = open; j < text.length; j++) {
    if (text[j] === "\\") j++;
    else if (text[j] === "[") depth++;
    else if (text[j] === "]" && --depth === 0) return j;
  }
  return -1;
}

// Index of the ")" closing the "(" at `open` (balanced parentheses inside), or -1.
function closingParen(text, open) {
  let depth = 0;
  for (let j = open; j < text.length; j++) {
    if (text[j] === "\\") j++;
    else if (text[j] === "(") depth++;
    else if (text[j] === ")" && --depth === 0) return j;
    else if (text[j] === "\n") return -1;
  }
  return -1;
}

export function renderInline(text, parent) {
  let plain = "";
  const flush = () => {
    if (!plain) return;
    const parts = plain.split("\n");
    parts.forEach((part, k) => {
      if (k > 0) parent.appendChild(el("br"));
      if (part) parent.appendChild(document.createTextNode(part));
    });
    plain = "";
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    const rest = text.slice(i);
    if (c === "\\" && i + 1 < text.length && /[!-\/:-@\[-`{-~]/.test(text[i + 1])) {
      plain += text[i + 1];
      i += 2;
      continue;
    }
    if (c === "`") {
      const run = /^`+/.exec(rest)[0];
      const end = text.indexOf(run, i + run.length);
      if (end >= 0 && text[end + run.length] !== "`") {
        flush();
        let code = text.slice(i + run.length, end).replace(/\n/g, " ");
        if (/^ .*[^ ].* $/.test(code)) code = code.slice(1, -1);
        const node = el("code");
        node.textContent = code;
        parent.appendChild(node);
        i = end + run.length;
        continue;
      }
      plain += run;
      i += run.length;
      continue;
    }
    if ((c === "*" || c === "_" || c === "~") && !(c === "_" && isWordChar(text[i - 1]))) {
      const double = text[i + 1] === c;
      const delim = c === "~" ? (double ? "~~" : null) : double ? c + c : c;
      if (delim && text[i + delim.length] !== undefined && !/\s/.test(text[i + delim.length])) {
        const end = findCloser(text, i + delim.length, delim);
        if (end > 0) {
          flush();
          const node = el(c === "~" ? "del" : delim.length === 2 ? "strong" : "em");
          renderInline(text.slice(i + delim.length, end), node);
          parent.appendChild(node);
          i = end + delim.length;
          continue;
        }
      }
      const run = double ? c + c : c;
      plain += run;
      i += run.length;
      continue;
    }
    if (c === "[" || (c === "!" && text[i + 1] === "[")) {
      const open = c === "!" ? i + 1 : i;
      const close = closingBracket(text, open);
      if (close > 0 && text[close + 1] === "(") {
        const end = closingParen(text, close + 1);
        if (end > 0) {
          const label = text.slice(open + 1, close);
          const target = text.slice(close + 2, end).trim().split(/\s+/)[0] || "";
          const href = safeUrl(target.replace(/^<(.*)>$/, "$1"));
          flush();
          if (href) {
            const a = link(href, parent);
            if (c === "!") a.textContent = "image: " + (label || href);  // no remote images
            else renderInline(label, a);
          } else {
            renderInline(label, parent);  // a link we will not follow: its text only
          }
          i = end + 1;
          continue;
        }
      }
      plain += text.slice(i, open + 1);
      i = open + 1;
      continue;
    }
    if (c === "<") {
      const auto = /^<((?:https?:|mailto:)[^\s<>]+)>/i.exec(rest);
      if (auto) {
        flush();
        link(auto[1], parent).textContent = auto[1];
        i += auto[0].length;
        continue;
      }
    }
    if ((c === "h" || c === "H") && !isWordChar(text[i - 1])) {
      const bare = URL_START.exec(rest);
      if (bare) {
        let url = bare[0];
        while (/[.,:;!?)\]*_]$/.test(url) && !(url.endsWith(")") && url.includes("("))) url = url.slice(0, -1);
        flush();
        link(url, parent).textContent = url;
        i += url.length;
        continue;
      }
    }
    plain += c;
    i++;
  }
  flush();
}

// ---- blocks ----------------------------------------------------------------------------------

function renderCode(lines, lang, parent) {
  const pre = el("pre");
  const code = el("code");
  if (lang) code.dataset.lang = lang;
  code.textContent = lines.join("\n");
  pre.appendChild(code);
  parent.appendChild(pre);
}

function renderTable(header, align, rows, parent) {
  const wrap = el("div", "table-wrap");
  const table = el("table");
  const head = el("thead");
  const tr = el("tr");
  header.forEach((cell, k) => {
    const th = el("th");
    if (align[k]) th.style.textAlign = align[k];
    renderInline(cell, th);
    tr.appendChild(th);
  });
  head.appendChild(tr);
  table.appendChild(head);
  const body = el("tbody");
  for (const row of rows) {
    const r = el("tr");
    header.forEach((_, k) => {
      const td = el("td");
      if (align[k]) td.style.textAlign = align[k];
      renderInline(row[k] ?? "", td);
      r.appendChild(td);
    });
    body.appendChild(r);
  }
  table.appendChild(body);
  wrap.appendChild(table);
  parent.appendChild(wrap);
}

// A list starting at lines[start]; returns the index after it.
function renderList(lines, start, parent) {
  const first = ITEM.exec(lines[start]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const marker = first[2].slice(-1);
  const list = el(ordered ? "ol" : "ul");
  if (ordered && parseInt(first[2], 10) !== 1) list.start = parseInt(first[2], 10);
  const items = [];
  let loose = false;
  const sameList = (line) => {
    const m = ITEM.exec(line);
    return m && m[1].length === indent && /\d/.test(m[2]) === ordered && m[2].slice(-1) === marker ? m : null;
  };
  let i = start;
  while (i < lines.length) {
    const m = sameList(lines[i]);
    if (!m) break;
    const contentIndent = m[1].length + m[2].length + 1;
    const body = [m[3] ?? ""];
    i++;
    let blankRun = 0;
    while (i < lines.length) {
      const line = lines[i];
      if (isBlank(line)) {
        blankRun++;
        body.push("");
        i++;
        continue;
      }
      const lead = /^ */.exec(line)[0].length;
      if (lead >= Math.min(contentIndent, indent + 2)) {
        body.push(line.slice(Math.min(lead, contentIndent)));
      } else if (blankRun === 0 && !startsBlock(lines, i)) {
        body.push(line.trim());  // a lazy continuation of the item's paragraph
      } else {
        break;
      }
      blankRun = 0;
      i++;
    }
    while (body.length && isBlank(body[body.length - 1])) body.pop();
    if (blankRun > 0 && i < lines.length && sameList(lines[i])) loose = true;
    if (body.some((line, k) => isBlank(line) && k > 0 && k < body.length - 1)) loose = true;
    items.push(body);  // blank lines before the next item were consumed: lines[i] is that item
  }
  for (const body of items) {
    const li = el("li");
    renderBlocks(body, li, !loose);
    list.appendChild(li);
  }
  parent.appendChild(list);
  return i;
}

// Renders markdown lines into parent; `tight`: paragraphs become bare inline content (list items).
function renderBlocks(lines, parent, tight = false) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (isBlank(line)) {
      i++;
      continue;
    }
    const fence = FENCE.exec(line);
    if (fence) {
      const mark = fence[1];
      const body = [];
      i++;
      while (i < lines.length) {
        const close = new RegExp("^ {0,3}" + (mark[0] === "`" ? "`" : "~") + "{" + mark.length + ",}\\s*$");
        if (close.test(lines[i])) {
          i++;
          break;
        }
        body.push(lines[i]);
        i++;
      }
      renderCode(body, fence[2], parent);
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      const h = el("h" + heading[1].length);
      renderInline(heading[2] ?? "", h);
      parent.appendChild(h);
      i++;
      continue;
    }
    if (RULE.test(line)) {
      parent.appendChild(el("hr"));
      i++;
      continue;
    }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && !isBlank(lines[i])) {
        const q = QUOTE.exec(lines[i]);
        body.push(q ? q[1] : lines[i]);
        i++;
      }
      const quote = el("blockquote");
      renderBlocks(body, quote);
      parent.appendChild(quote);
      continue;
    }
    if (startsTable(lines, i)) {
      const header = tableCells(line);
      const align = tableCells(lines[i + 1]).map((cell) =>
        cell.startsWith(":") && cell.endsWith(":") ? "center" : cell.endsWith(":") ? "right" : cell.startsWith(":") ? "left" : "");
      const rows = [];
      i += 2;
      while (i < lines.length && !isBlank(lines[i]) && lines[i].includes("|")) rows.push(tableCells(lines[i++]));
      renderTable(header, align, rows, parent);
      continue;
    }
    const item = ITEM.exec(line);
    if (item && item[3] !== undefined) {
      i = renderList(lines, i, parent);
      continue;
    }
    const paragraph = [line.trim()];
    i++;
    while (i < lines.length && !isBlank(lines[i]) && !startsBlock(lines, i)) paragraph.push(lines[i++].trim());
    if (tight) {
      if (parent.lastChild && parent.lastChild.nodeType === Node.TEXT_NODE) parent.appendChild(el("br"));
      renderInline(paragraph.join("\n"), parent);
    } else {
      const p = el("p");
      renderInline(paragraph.join("\n"), p);
      parent.appendChild(p);
    }
  }
}

// The answer `text` as a fragment of DOM nodes.
export function renderMarkdown(text) {
  const fragment = document.createDocumentFragment();
  renderBlocks(text.replace(/\r\n?/g, "\n").replace(/\t/g, "    ").split("\n"), fragment);
  return fragment;
}
