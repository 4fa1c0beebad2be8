// FERRY_TRACE: a Chrome/Perfetto trace (JSON, "X" complete events) of this
// process, written at MPI_Finalize to FERRY_TRACE's path (%r the rank, %p
// the process id, %h the host). One span per intercepted MPI call (its
// route and bytes), and within a call the engine's phases (set-up,
// handshake, device work, finish) and its transport; flow arrows from a
// device message's send to its receive; the GDA queues' operations as
// async spans (engine/transport/gda/proxy.h); each engine call's device
// work on its GPU's track (engine/core/gpu_span.h). Timestamps are the
// system clock in microseconds, so the ranks of one machine line up;
// `ferry-trace merge` puts every rank's file in one (a process per rank).
//
// Off (the default) it costs a load of one flag where a span would start:
// no clock is read and nothing is kept.
#pragma once

#include <cstdint>
#include <string>

namespace ferry {

extern const bool g_trace_enabled;
inline bool trace_enabled() { return g_trace_enabled; }

// The system clock in nanoseconds, and in microseconds (spans' time).
std::int64_t trace_now_ns();
std::int64_t trace_now_us();

// One complete span on the calling thread; args: a JSON object's members
// without braces ("\"route\":\"engine\"") or empty.
void trace_span(const char* name, const char* category, std::int64_t start_us, std::int64_t end_us,
                const std::string& args);

// A span that may overlap others of its thread (an operation in flight
// among many): a Perfetto async span ("b" and "e" events) under id, unique
// in the process (trace_new_flow_id serves).
void trace_async_span(const char* name, const char* category, std::uint64_t id, std::int64_t start_us,
                      std::int64_t end_us, const std::string& args);

// A span on a track of the process named track ("GPU 0"), not the calling
// thread's: work that a device timed. Spans that overlap on one track go
// to further lanes beneath it ("GPU 0 (2)"), so that each lane nests.
void trace_track_span(const std::string& track, const char* name, const char* category, std::int64_t start_us,
                      std::int64_t end_us, const std::string& args);

// A flow arrow between spans of two processes (a message from its send to
// its receive): a new id, unique in the job once the rank is set; its start
// and its finish, each bound to the span open on the calling thread.
std::uint64_t trace_new_flow_id();
void trace_flow_start(std::uint64_t id);
void trace_flow_finish(std::uint64_t id);

// text as the contents of a JSON string.
std::string trace_escape(const char* text);

// The rank that names the file and the process in it (at MPI_Init).
void trace_set_rank(int rank);
// Writes every span kept so far to the file (at MPI_Finalize); false (and a
// WARN) where the file cannot be written.
bool trace_write();

// Test hooks: the path FERRY_TRACE's pattern gives for rank, and the spans
// kept, as JSON events.
std::string trace_path_for(const std::string& pattern, int rank);

}  // namespace ferry
