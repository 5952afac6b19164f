import { ShellbaseError } from '../errors.js';

/**
 * A lifecycle as a table, as runc's `containerState.transition()` has it:
 * state × event → next state. An event a state does not list is refused with
 * a typed error (failed_precondition) and changes nothing.
 */
export type Transitions<S extends string, E extends string> = Record<S, Partial<Record<E, S>>>;

export class Lifecycle<S extends string, E extends string> {
  constructor(private readonly what: string, private readonly table: Transitions<S, E>, private readonly hints: Partial<Record<S, string>> = {}) {}

  /** The state after `event`, or the refusal. */
  next(name: string, state: S, event: E): S {
    const to = this.table[state][event];
    if (to === undefined) {
      throw new ShellbaseError('failed_precondition', `${this.what} ${name} is ${state}: it cannot ${event}`, {
        details: { [this.what]: name, state, event }, hint: this.hints[state] ?? `see the ${this.what}'s state first`,
      });
    }
    return to;
  }

  allows(state: S, event: E): boolean {
    return this.table[state][event] !== undefined;
  }
}
