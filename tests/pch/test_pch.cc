// Compiles tests/CMakeLists.txt's precompiled header once per build tree; every suite reuses
// it. Nothing else belongs here.
