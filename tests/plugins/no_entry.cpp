// A shared library that is not a softneuro plugin (no entry points).
extern "C" int some_unrelated_function() { return 42; }
