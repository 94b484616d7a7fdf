// Skein's shim over two calls of Luau's code generator that its C API (luacodegen.h) lacks,
// built by build.rs with the crate's `native` feature and called from src/vm/native.rs.
//
// - `skein_codegen_create` makes a VM's code generator with an explicit bound on its executable
//   memory and a callback told of every block of pages it maps and unmaps: the C API's
//   `luau_codegen_create` takes neither (Luau's defaults are 4 MiB blocks, 256 MiB per VM).
// - `skein_codegen_compile` is `luau_codegen_compile` with no C++ exception let through into
//   Rust (the generator allocates with `new` and `std::vector`).
//
// The declarations below are Luau's own (CodeGen/include/Luau/CodeGen.h and CodeGenOptions.h of
// the Luau that mlua-sys builds), written out so the shim needs no include path into that crate:
// only pointers and integers cross, so a signature Luau changes fails at link time, not at run
// time.

#include <stddef.h>

struct lua_State;

namespace Luau
{
namespace CodeGen
{
using AllocationCallback = void(void* context, void* oldPointer, size_t oldSize, void* newPointer, size_t newSize);

void create(lua_State* L, size_t blockSize, size_t maxTotalSize, AllocationCallback* allocationCallback, void* allocationCallbackContext);
bool isNativeExecutionEnabled(lua_State* L);
} // namespace CodeGen
} // namespace Luau

extern "C" void luau_codegen_compile(lua_State* L, int idx);

// Makes L's code generator: blocks of `blockSize` bytes, at most `maxTotalSize` in all, each
// mapping and unmapping reported to `onPages(context, ...)`. Answers 1 when L has one now, 0 when
// it could not be made (no memory for its first block).
extern "C" int skein_codegen_create(
    lua_State* L, size_t blockSize, size_t maxTotalSize, Luau::CodeGen::AllocationCallback* onPages, void* context)
{
    try
    {
        Luau::CodeGen::create(L, blockSize, maxTotalSize, onPages, context);
        return Luau::CodeGen::isNativeExecutionEnabled(L) ? 1 : 0;
    }
    catch (...)
    {
        return 0;
    }
}

// Compiles the Luau function at `idx` of L's stack. Answers 0 when the generator threw.
extern "C" int skein_codegen_compile(lua_State* L, int idx)
{
    try
    {
        luau_codegen_compile(L, idx);
        return 1;
    }
    catch (...)
    {
        return 0;
    }
}
