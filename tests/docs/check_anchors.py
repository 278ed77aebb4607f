#!/usr/bin/env python3
"""Every link to a #fragment inside the built site (SITE_DIR) names an id
that exists on the target page: mkdocs 1.4 checks pages, not fragments.

    check_anchors.py SITE_DIR
"""
import html.parser
import pathlib
import sys
import urllib.parse


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])


def main():
    site = pathlib.Path(sys.argv[1]).resolve()
    pages = {}
    for f in site.rglob("*.html"):
        p = Page()
        p.feed(f.read_text(errors="replace"))
        pages[f] = p
    bad = []
    for f, p in pages.items():
        for href in p.links:
            u = urllib.parse.urlparse(href)
            if u.scheme or u.netloc or not u.fragment:
                continue
            target = f if not u.path else (f.parent / u.path).resolve()
            if target.is_dir():
                target = target / "index.html"
            if target not in pages:
                continue  # a page mkdocs did not build: mkdocs --strict reports it
            if urllib.parse.unquote(u.fragment) not in pages[target].ids:
                bad.append(f"{f.relative_to(site)}: {href}")
    for b in sorted(set(bad)):
        print(f"broken anchor: {b}")
    print(f"{len(pages)} pages, {len(set(bad))} broken anchors")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
