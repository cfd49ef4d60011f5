# The layer check's program (run by scripts/check_layers.sh, which names the files:
# the rules, the design notes, every CMakeLists.txt, then every .cc/.h of lib/ and apps/).
# Plain POSIX awk (Debian's default mawk is enough).

function fail(msg) { print msg; errors++ }
function show(f) { return f ~ /\// ? f : "lib/" f }  # a folder as a path
function folder_of(path,    p) { split(path, p, "/"); return p[1] == "lib" ? p[2] : p[1] "/" p[2] }
# The folder an include "<dir>/..." names, or "" for a header from outside mtrain.
function folder_named(dir) {
  if (dir in decl) return dir
  if (("apps/" dir) in decl) return "apps/" dir
  return ""
}
function add_allowed(x, list,    n, a, i) {
  n = split(list, a)
  for (i = 1; i <= n; i++) {
    allowed[x, a[i]] = 1
    adj[x] = adj[x] " " a[i]
    refer(a[i])
  }
  hint[x] = hint[x] words(list)
}
function words(s) { gsub(/[ \t]+/, " ", s); sub(/^ /, "", s); sub(/ $/, "", s); return s == "" ? "" : " " s }
function refer(name) { nrefs++; ref_name[nrefs] = name; ref_line[nrefs] = FNR }
# "a -> b -> t" if t can be reached from x along `edges`, else "" (gen marks the visited nodes).
function path_to(edges, x, t,    n, a, i, p) {
  if (x == t) return t
  seen[x] = gen
  n = split(edges == "rules" ? adj[x] : link[x], a)
  for (i = 1; i <= n; i++) {
    if (seen[a[i]] == gen) continue
    p = path_to(edges, a[i], t)
    if (p != "") return x " -> " p
  }
  return ""
}
# Depth-first search of the rules' graph; reports each cycle it closes.
function find_cycles(x,    n, a, i, j, p) {
  color[x] = 1
  stack[++depth] = x
  n = split(adj[x], a)
  for (i = 1; i <= n; i++) {
    if (color[a[i]] == 1) {
      p = ""
      for (j = depth; stack[j] != a[i]; j--) p = stack[j] " -> " p
      fail(rules ":" decl[a[i]] ": the rules have a cycle: " a[i] " -> " p a[i] \
           " (rule: upper may use lower, never the reverse)")
    } else if (color[a[i]] == 0) {
      find_cycles(a[i])
    }
  }
  depth--
  color[x] = 2
}

# --- the rules ------------------------------------------------------------------------
FILENAME == rules {
  line = $0
  sub(/#.*/, "", line)
  if (line ~ /^[ \t]*$/) next
  if (line ~ /^[ \t]/) {  # continues the list above
    if (cur == "") fail(rules ":" FNR ": a continuation line needs a '<folder>:' line above it")
    else add_allowed(cur, line)
    next
  }
  cur = ""
  colon = index(line, ":")
  n = split(substr(line, 1, colon - 1), head)
  list = substr(line, colon + 1)
  if (colon == 0 || n < 1 || n > 2 || (n == 2 && head[1] != "never" && head[1] != "only")) {
    fail(rules ":" FNR ": cannot read this line (expected '<folder>: ...', 'never <folder>: ...' or 'only <header>: ...')")
    next
  }
  if (head[1] == "never") {
    refer(head[2])
    m = split(list, a)
    for (i = 1; i <= m; i++) {
      refer(a[i])
      nnever++; never_x[nnever] = head[2]; never_y[nnever] = a[i]; never_line[nnever] = FNR
      never[head[2], a[i]] = FNR
    }
  } else if (head[1] == "only") {
    nonly++; only_hdr[nonly] = head[2]; only_list[nonly] = words(list) " "; only_line[nonly] = FNR
    m = split(list, a)
    for (i = 1; i <= m; i++) refer(a[i])
  } else if (head[1] in decl) {
    fail(rules ":" FNR ": " head[1] " already has a line (" rules ":" decl[head[1]] ")")
  } else {
    cur = head[1]
    decl[cur] = FNR
    ndecl++; decl_order[ndecl] = cur
    add_allowed(cur, list)
  }
  next
}

# --- the design notes: the "Files over <max_lines> lines" section ---------------------------
FILENAME == notes_file {
  if ($0 ~ /^## /) in_list = ($0 == "## Files over " max_lines " lines")
  if (in_list && $0 ~ /^- `[^`]+`/) {
    rest = substr($0, 4)
    path = substr(rest, 1, index(rest, "`") - 1)
    listed[path] = FNR
    nlisted++; listed_order[nlisted] = path
    reason = substr(rest, index(rest, "`") + 1)
    if (reason !~ /[A-Za-z]/) fail(notes ":" FNR ": " path " needs a one-line reason")
  }
  next
}

# --- CMakeLists.txt: who links whom ------------------------------------------------------
FILENAME ~ /(^|\/)CMakeLists\.txt$/ {
  line = $0
  sub(/#.*/, "", line)
  cmake[folder_of(FILENAME)] = cmake[folder_of(FILENAME)] " " line
  next
}

# --- sources ---------------------------------------------------------------------------
{
  lines[FILENAME] = FNR
  if (FNR == 1) { nsrc++; src[nsrc] = FILENAME }
}
/^[ \t]*#[ \t]*include[ \t]*["<]/ {
  s = $0
  sub(/^[ \t]*#[ \t]*include[ \t]*/, "", s)
  quote = substr(s, 1, 1)
  s = substr(s, 2)
  close_quote = quote == "<" ? ">" : "\""
  inc = substr(s, 1, index(s, close_quote) - 1)
  x = folder_of(FILENAME)
  where = FILENAME ":" FNR ": "
  nincludes++
  for (i = 1; i <= nonly; i++) {
    if (index(inc, only_hdr[i]) == 1 && index(only_list[i], " " x " ") == 0)
      fail(where show(x) " must not include " quote inc close_quote " (rule: only" only_list[i] "include " only_hdr[i] \
           ", " rules ":" only_line[i] ")")
  }
  slash = index(inc, "/")
  if (quote != "\"" || slash == 0 || !(x in decl)) next
  y = folder_named(substr(inc, 1, slash - 1))
  if (y == "" || y == x) next
  if ((x, y) in allowed) {
    if (!((x, y) in used)) { used[x, y] = where; nused++; used_x[nused] = x; used_y[nused] = y }
    next
  }
  if ((x, y) in never) rule = x " never includes " y ", " rules ":" never[x, y]
  else rule = show(x) " may include only:" (hint[x] == "" ? " nothing" : hint[x]) ", " rules ":" decl[x]
  fail(where show(x) " must not include " inc " (rule: " rule ")")
  print "  hint: move what " show(x) " needs down to a folder it may use, or pass it in through an" \
        " interface; a new dependency is a line in " rules " (" notes " \"Layers\")"
}

END {
  # The rules themselves: every folder has a line, every name is a folder, no cycle,
  # and no chain of allowed includes breaks a "never".
  n = split(folders, fs)
  for (i = 1; i <= n; i++) {
    f = fs[i]
    sub(/^lib\//, "", f)
    if (!(f in decl))
      fail(rules ": " fs[i] " has no line: add '" f ": <folders it may include from>'")
  }
  for (i = 1; i <= nrefs; i++)
    if (!(ref_name[i] in decl)) fail(rules ":" ref_line[i] ": " ref_name[i] " is not a folder with a line of its own")
  for (i = 1; i <= ndecl; i++) if (color[decl_order[i]] == 0) find_cycles(decl_order[i])
  for (i = 1; i <= nnever; i++) {
    gen++
    p = path_to("rules", never_x[i], never_y[i])
    if (p != "")
      fail(rules ":" never_line[i] ": the may-include lines let " never_x[i] " reach " never_y[i] " (" p \
           ") (rule: " never_x[i] " never includes " never_y[i] ")")
  }

  # The link lines: a folder that includes lib/<y> links mtrain_<y>, directly or through another.
  for (f in cmake) {
    t = cmake[f]
    while (match(t, /target_link_libraries[ \t]*\([^)]*\)/)) {
      inner = substr(t, RSTART, RLENGTH - 1)  # without the ")"
      t = substr(t, RSTART + RLENGTH)
      sub(/^target_link_libraries[ \t]*\(/, "", inner)
      m = split(inner, tok)
      targets[f] = targets[f] " " tok[1]
      for (i = 2; i <= m; i++) if (tok[i] ~ /^mtrain_/) link[tok[1]] = link[tok[1]] " " tok[i]
    }
    t = cmake[f]
    while (match(t, /mtrain_library[ \t]*\([ \t]*[A-Za-z0-9_]+/)) {
      name = substr(t, RSTART, RLENGTH)
      sub(/.*[( \t]/, "", name)
      targets[f] = targets[f] " mtrain_" name
      t = substr(t, RSTART + RLENGTH)
    }
  }
  for (j = 1; j <= nused; j++) {
    x = used_x[j]; y = used_y[j]
    if (!(x in cmake) || !(y in cmake) || y ~ /\//) continue
    m = split(targets[x], tg)
    reached = 0
    for (i = 1; i <= m && !reached; i++) {
      gen++
      reached = path_to("link", tg[i], "mtrain_" y) != ""
    }
    if (!reached)
      fail(used[x, y] show(x) " includes " y "/ but " show(x) "/CMakeLists.txt does not link mtrain_" y \
           " (directly or through another library) (rule: target_link_libraries mirrors the layers)")
  }

  # Long files: a .cc/.h under lib/ over max_lines is listed in the notes with a reason.
  for (i = 1; i <= nsrc; i++) {
    f = src[i]
    if (f !~ /^lib\// || lines[f] <= max_lines || (f in listed)) continue
    fail(f ":" max_lines + 1 ": " lines[f] " lines, over " max_lines " (rule: a .cc/.h in lib/ stays within " \
         max_lines " lines)")
    print "  hint: split it by concern, or list it with a one-line reason under \"## Files over " \
          max_lines " lines\" in " notes
  }
  for (i = 1; i <= nlisted; i++) {
    f = listed_order[i]
    if (!(f in lines)) fail(notes ":" listed[f] ": " f " is listed under \"Files over " max_lines \
                            " lines\" but is not a source file: remove the line")
    else if (lines[f] <= max_lines) fail(notes ":" listed[f] ": " f " is listed under \"Files over " \
                                          max_lines " lines\" but has " lines[f] " lines: remove the line")
  }

  if (errors) {
    print "check_layers: " errors " problem(s); the rules are in " rules
    exit 1
  }
  print "check_layers: " nsrc " files, " nincludes " includes: OK"
}
