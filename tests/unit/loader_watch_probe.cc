// A library for LoaderWatch's test to load: nothing else in the process
// loads it.
extern "C" int ferry_loader_watch_probe() { return 42; }
