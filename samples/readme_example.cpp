// The example in README.md, verbatim; built and run as a test so it stays true.
#include <loom/loom.h>
#include <iostream>

int main() {
  auto x = loom::randn({4, 3});             // records a node, computes nothing
  auto y = loom::relu(x * 2 + 1).sum();     // still only a graph
  std::cout << loom::explain(y);            // prints the pending graph; runs nothing
  std::cout << y.item<float>() << "\n";     // a value is needed: hash, compile, run
  std::cout << loom::metrics();             // 1 graph, 1 cache miss
}
