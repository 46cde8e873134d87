# rule: blocked_module
# marker: pwned_f5_jit
# Family 5: an LLVM JIT in the data stack compiles a call to libc's system().
import llvmlite.binding as llvm
import llvmlite.binding.executionengine as ee

llvm.initialize()
llvm.initialize_native_target()
llvm.initialize_native_asmprinter()
ir = r"""
@cmd = private constant [26 x i8] c"echo ran > pwned_f5_jit\0A\00\00"
declare i32 @system(i8*)
define i32 @run() {
  %p = getelementptr [26 x i8], [26 x i8]* @cmd, i32 0, i32 0
  %r = call i32 @system(i8* %p)
  ret i32 %r
}
"""
mod = llvm.parse_assembly(ir)
target = llvm.Target.from_default_triple().create_target_machine()
engine = llvm.create_mcjit_compiler(mod, target)
engine.finalize_object()
addr = engine.get_function_address("run")
ee.CFUNCTYPE(ee.c_int)(addr)()
