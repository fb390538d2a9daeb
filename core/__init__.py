from hotpath import install_pure_hook

install_pure_hook()  # before any compiled module of this package is imported
