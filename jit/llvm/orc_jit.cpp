#include "jit/llvm/orc_jit.h"

#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <xxhash.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>

#include <loom/error.h>

#include "jit/llvm/runtime_calls.h"

namespace loom::jit::llvm_cpu {

namespace {

void init_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

std::unique_ptr<llvm::TargetMachine> make_target_machine() {
  init_llvm();
  const Target& t = host_target();
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(t.triple, err);
  if (!target) throw Error("loom: llvm: no target for " + t.triple + ": " + err);
  llvm::TargetOptions opts;
  return std::unique_ptr<llvm::TargetMachine>(target->createTargetMachine(
      t.triple, t.cpu, t.features, opts, llvm::Reloc::PIC_, std::nullopt, llvm::CodeGenOpt::Aggressive));
}

// One LLJIT for the process: each executable gets its own JITDylib in it.
struct Jit {
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  std::mutex mu;
  std::atomic<uint64_t> counter{0};
  Jit() {
    init_llvm();
    auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!jtmb) throw Error("loom: llvm: cannot describe the host: " + llvm::toString(jtmb.takeError()));
    // JITLink, not LLVM 16's default RuntimeDyld on ELF: RuntimeDyld's
    // memory manager maps an object's code and its constants separately,
    // possibly more than 2 GiB apart (it happened once CUDA had reserved
    // much of the address space), and then silently truncates their 32-bit
    // pc-relative references. JITLink puts all of an object's sections in
    // one allocation, and reaches anything further (libc, loom's own
    // functions) through stubs it makes.
    auto j = llvm::orc::LLJITBuilder()
                 .setJITTargetMachineBuilder(std::move(*jtmb))
                 .setObjectLinkingLayerCreator([](llvm::orc::ExecutionSession& es, const llvm::Triple&) {
                   return llvm::Expected<std::unique_ptr<llvm::orc::ObjectLayer>>(
                       std::make_unique<llvm::orc::ObjectLinkingLayer>(es));
                 })
                 .create();
    if (!j) throw Error("loom: llvm: cannot create the JIT: " + llvm::toString(j.takeError()));
    lljit = std::move(*j);
  }
};
// Never destroyed: executables cached in static objects are released at
// exit, after any function-local static would be gone, and unload from it.
Jit& jit() {
  static Jit* j = new Jit();
  return *j;
}

}  // namespace

std::string module_text(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return s;
}

std::vector<char> compile_to_object(llvm::Module& m, const std::string& ir_dump_path) {
  std::unique_ptr<llvm::TargetMachine> tm = make_target_machine();
  m.setDataLayout(tm->createDataLayout());
  std::string verify_errors;
  llvm::raw_string_ostream verr(verify_errors);
  if (llvm::verifyModule(m, &verr)) {
    std::string where;
    if (!ir_dump_path.empty()) {
      std::ofstream(ir_dump_path) << module_text(m);
      where = " (IR written to " + ir_dump_path + ")";
    }
    throw Error("loom: llvm: generated IR does not verify: " + verr.str() + where);
  }
  {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder pb(tm.get());
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2).run(m, mam);
  }
  llvm::SmallVector<char, 0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CGFT_ObjectFile))
    throw Error("loom: llvm: the target cannot emit object files");
  pm.run(m);
  return std::vector<char>(buf.begin(), buf.end());
}

std::shared_ptr<LoadedKernels> load_objects(std::span<const std::span<const char>> objects,
                                            std::span<const std::string> symbols) {
  Jit& j = jit();
  std::lock_guard lock(j.mu);
  auto& es = j.lljit->getExecutionSession();
  auto jd = es.createJITDylib("loom_graph_" + std::to_string(j.counter++));
  if (!jd) throw Error("loom: llvm: " + llvm::toString(jd.takeError()));
  // Kernels may call a few libc functions (memset, fmod): resolve them in-process.
  auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(j.lljit->getDataLayout().getGlobalPrefix());
  if (!gen) throw Error("loom: llvm: " + llvm::toString(gen.takeError()));
  jd->addGenerator(std::move(*gen));
  // loom's own functions: defined here by address (libloom hides its symbols).
  llvm::orc::SymbolMap own;
  own[j.lljit->mangleAndIntern(kRandomCall)] = llvm::JITEvaluatedSymbol(
      llvm::pointerToJITTargetAddress(&loom_jit_random), llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable);
  if (auto e = jd->define(llvm::orc::absoluteSymbols(std::move(own))))
    throw Error("loom: llvm: " + llvm::toString(std::move(e)));
  for (std::span<const char> object : objects) {
    auto buffer = llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(object.data(), object.size()), "loom_graph");
    if (auto e = j.lljit->addObjectFile(*jd, std::move(buffer)))
      throw Error("loom: llvm: cannot link a compiled graph: " + llvm::toString(std::move(e)));
  }
  std::shared_ptr<LoadedKernels> out(new LoadedKernels());
  out->dylib_ = &*jd;
  // The objects as linked, and the JITDylib's symbol tables and session
  // state (measured: tens of KiB per dylib on LLVM 16).
  constexpr int64_t kPerDylib = 64 << 10;
  out->bytes_ = kPerDylib;
  for (std::span<const char> object : objects) out->bytes_ += static_cast<int64_t>(object.size());
  for (const std::string& symbol : symbols) {
    auto sym = j.lljit->lookup(*jd, symbol);
    if (!sym) throw Error("loom: llvm: kernel " + symbol + " not found: " + llvm::toString(sym.takeError()));
    out->kernels_.push_back(sym->toPtr<KernelFn>());
  }
  return out;
}

LoadedKernels::~LoadedKernels() {
  if (!dylib_) return;
  Jit& j = jit();
  std::lock_guard lock(j.mu);
  llvm::consumeError(j.lljit->getExecutionSession().removeJITDylib(*static_cast<llvm::orc::JITDylib*>(dylib_)));
}

std::string target_key() {
  const Target& t = host_target();
  char h[24];
  std::snprintf(h, sizeof h, "%016llx", static_cast<unsigned long long>(XXH3_64bits(t.features.data(), t.features.size())));
  return "llvm" + std::to_string(LLVM_VERSION_MAJOR) + "-" + t.cpu + "-" + h;
}

}  // namespace loom::jit::llvm_cpu
