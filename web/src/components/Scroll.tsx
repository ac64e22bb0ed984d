import type { ComponentChildren } from 'preact';

/**
 * A wide table's frame: on a narrow window the table scrolls sideways inside it instead of
 * widening the page. It is focusable and labelled so the keyboard can scroll it too.
 */
export function Scroll({ label, children }: { label: string; children: ComponentChildren }) {
  return (
    <div class="scroll" role="region" aria-label={label} tabIndex={0}>
      {children}
    </div>
  );
}
