/** The next-page button of a keyset-paged list: shown while the API gives a `nextPageToken`. */
export function MorePager({
  next,
  label,
  onMore,
}: {
  next: string | null | undefined;
  label: string;
  onMore: (token: string) => void;
}) {
  if (!next) return null;
  return (
    <nav class="pager" aria-label="Pages">
      <button type="button" onClick={() => onMore(next)}>
        {label}
      </button>
    </nav>
  );
}
