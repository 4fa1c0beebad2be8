# Reduces one ScaLAPACK tester's output to what Ferry must not change.
#   mode=exact     fields under a timing column (TIME, WALL, CPU, Mflops, ...)
#                  become '#'; residuals and verdicts stay as printed.
#   mode=verdicts  every number becomes '#': the table layout and each row's
#                  PASSED/FAILED remain, for testers whose residuals vary from
#                  run to run on plain Open MPI.
# Whitespace is collapsed, and lines that depend on process interleaving
# rather than on results are dropped.

function is_timing_word(word) {
  return word ~ /^(TIME|Time|time|WALL|CPU|MFLOPS|MFLOP2|Mflops)$/
}

# Header lines name their columns and hold no numbers; remember where each
# timing column lies so the fields printed under it can be masked.
function remember_timing_columns(line,   rest, offset, word_start, word) {
  timing_columns = 0
  rest = line
  offset = 0
  while (match(rest, /[^ ]+/)) {
    word_start = offset + RSTART
    word = substr(rest, RSTART, RLENGTH)
    if (is_timing_word(word)) {
      timing_start[++timing_columns] = word_start
      timing_end[timing_columns] = word_start + RLENGTH - 1
    }
    offset += RSTART + RLENGTH - 1
    rest = substr(rest, RSTART + RLENGTH)
  }
}

function under_timing_column(first, last,   i) {
  for (i = 1; i <= timing_columns; i++)
    if (first <= timing_end[i] && last >= timing_start[i]) return 1
  return 0
}

function mask_timing_fields(line,   rest, offset, field_start, field, result) {
  result = ""
  rest = line
  offset = 0
  while (match(rest, /[^ ]+/)) {
    field_start = offset + RSTART
    field = substr(rest, RSTART, RLENGTH)
    if (under_timing_column(field_start, field_start + RLENGTH - 1)) field = "#"
    result = result (result == "" ? "" : " ") field
    offset += RSTART + RLENGTH - 1
    rest = substr(rest, RSTART + RLENGTH)
  }
  return result
}

# gfortran prints these from every rank at exit, in no fixed order.
/^Note: The following floating-point exceptions are signalling/ { next }

# The BLACS tester skips this test when an unordered sum happens to come out
# repeatable, which depends on the order messages arrive in.
/^ *(PASSED|SKIPPED) +REPEATABLE SUM TEST/ { $1 = "PASSED-OR-SKIPPED" }

function is_header(   i, names_timing) {
  for (i = 1; i <= NF; i++) {
    if ($i ~ /^[-+]?[0-9]*\.?[0-9]+([EeDd][-+]?[0-9]+)?$/) return 0
    if (is_timing_word($i)) names_timing = 1
  }
  return names_timing
}

{
  if (is_header()) remember_timing_columns($0)
  if (mode == "verdicts") {
    line = $0
    gsub(/[-+]?[0-9]*\.?[0-9]+([EeDd][-+]?[0-9]+)?/, "#", line)
    $0 = line
    $1 = $1
    print
  } else {
    print mask_timing_fields($0)
  }
}
