# Reduces one ScaLAPACK tester's output to what Ferry must not change.
#   mode=exact (default)  fields under a timing column (TIME, WALL, CPU,
#                  Mflops, ...) become '#'; residuals and verdicts stay as
#                  printed.
#   mode=verdicts  every number becomes '#': the table layout and each row's
#                  PASSED/FAILED remain, for testers whose residuals vary from
#                  run to run on plain Open MPI.
# Whitespace is collapsed, and lines that depend on process interleaving
# rather than on results are dropped.

# Fortran prints numbers such as 3, -1.00, 10., .5E-01 and 0.41D+02.
function is_number(text) {
  return text ~ /^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([EeDd][-+]?[0-9]+)?$/
}

function is_timing_word(word) {
  return word ~ /^(TIME|Time|time|WALL|CPU|MFLOPS|MFLOP2|Mflops)$/
}

# Splits line at blanks like awk does, also keeping the column where each
# field starts and ends. Returns the number of fields.
function split_at_columns(line, fields, first, last,   count, consumed) {
  count = 0
  consumed = 0
  while (match(line, /[^ ]+/)) {
    fields[++count] = substr(line, RSTART, RLENGTH)
    first[count] = consumed + RSTART
    last[count] = consumed + RSTART + RLENGTH - 1
    consumed += RSTART + RLENGTH - 1
    line = substr(line, RSTART + RLENGTH)
  }
  return count
}

# A header names its columns and holds no numbers. Fortran prints each row
# field under its column name, so remember where the timing columns lie.
function remember_timing_columns(   fields, first, last, count, i, names_timing) {
  count = split_at_columns($0, fields, first, last)
  for (i = 1; i <= count; i++) {
    if (is_number(fields[i])) return
    if (is_timing_word(fields[i])) names_timing = 1
  }
  if (!names_timing) return
  timing_columns = 0
  for (i = 1; i <= count; i++) {
    if (!is_timing_word(fields[i])) continue
    timing_first[++timing_columns] = first[i]
    timing_last[timing_columns] = last[i]
  }
}

function under_timing_column(field_first, field_last,   i) {
  for (i = 1; i <= timing_columns; i++)
    if (field_first <= timing_last[i] && field_last >= timing_first[i]) return 1
  return 0
}

function timings_masked(   fields, first, last, count, i, result) {
  count = split_at_columns($0, fields, first, last)
  result = ""
  for (i = 1; i <= count; i++) {
    if (under_timing_column(first[i], last[i])) fields[i] = "#"
    result = result (i > 1 ? " " : "") fields[i]
  }
  return result
}

# gfortran prints these from every rank at exit, in no fixed order.
/^Note: The following floating-point exceptions are signalling/ { next }

# The BLACS tester skips this test when an unordered sum happens to come out
# repeatable, which depends on the order messages arrive in.
/^ *(PASSED|SKIPPED) +REPEATABLE SUM TEST/ { $1 = "PASSED-OR-SKIPPED" }

mode == "verdicts" {
  gsub(/[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([EeDd][-+]?[0-9]+)?/, "#")
  $1 = $1
  print
  next
}

{
  remember_timing_columns()
  print timings_masked()
}
