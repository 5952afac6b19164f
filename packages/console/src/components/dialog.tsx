import type { ComponentChildren } from 'preact';
import { useEffect, useRef } from 'preact/hooks';

/** A modal <dialog>: the browser traps focus in it and Escape closes it. */
export function Dialog({ title, onClose, children }: { title: string; onClose: () => void; children: ComponentChildren }) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
    return () => d?.close();
  }, []);
  return (
    <dialog ref={ref} aria-label={title} onClose={onClose} onCancel={onClose}>
      <h2>{title}</h2>
      {children}
    </dialog>
  );
}

/** "Are you sure?" with the consequence spelled out; `danger` words the button. */
export function Confirm({ title, body, danger, onYes, onNo }: {
  title: string; body: ComponentChildren; danger: string; onYes: () => void; onNo: () => void;
}) {
  return (
    <Dialog title={title} onClose={onNo}>
      <div class="dialog-body">{body}</div>
      <div class="row end">
        <button type="button" onClick={onNo} autofocus>Cancel</button>
        <button type="button" class="danger" onClick={onYes}>{danger}</button>
      </div>
    </Dialog>
  );
}
