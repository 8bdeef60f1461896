"""What a cache folder must prove before fastlower decodes anything read from it.

A cache folder is input from whoever can write it. Checksums catch damage, not an
adversary, so every entry carries a keyed MAC (keyed BLAKE3) over its bytes and the
key it is stored under, made with a secret only its owner can read. An entry whose
MAC does not verify is a miss: it is never decoded, and it is replaced.

* :mod:`.secret`: the secret key (the user's, generated on first use, or a file a
  team shares, ``FASTLOWER_CACHE_KEY_FILE``) and the checks on its file.
* :mod:`.seal`: the MAC over an entry, made and checked as the entry streams.
* :mod:`.plain`: unpickling of plain data (builtins and a few ExecuTorch records)
  for what needs no more, behind the MAC as a second wall.
* :mod:`.disk`: the ``diskcache`` disk both caches open their folder with: values
  are bytes or files, never pickles, and file names stay inside the folder.
* :mod:`.folder`: whether others can write a folder; such a folder is used only
  with an explicitly given key.

``fastlower.preprocess.folder`` opens a folder under these rules for both caches.
"""
