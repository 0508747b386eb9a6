#include <cstdio>
int main() { std::puts("inkling: under construction"); return 0; }
