/**
 * `Symbol.asyncDispose`, which `await using` calls when its block ends. Node has it from 18.18
 * and 20.4 on; on an older Node 18 this module defines it as the very symbol Node later
 * ships (`Symbol.for("nodejs.asyncDispose")`), so that code compiled by TypeScript (whose
 * `await using` reads `Symbol.asyncDispose` when it runs) works there too. Nothing else is
 * polyfilled, and where Node has the symbol nothing is changed.
 *
 * Imported for this side effect before any class that disposes is defined.
 *
 * @module
 */

if (typeof Symbol.asyncDispose !== "symbol") {
  Object.defineProperty(Symbol, "asyncDispose", { value: Symbol.for("nodejs.asyncDispose") });
}

export {};
