"""Packaging for eagle3-workbench: every setting lives in settings.ini (nbdev 2 layout)."""
from configparser import ConfigParser
from pathlib import Path
import setuptools

here = Path(__file__).parent
cfg = ConfigParser(delimiters=['='])
cfg.read(here/'settings.ini', encoding='utf-8')
cfg = cfg['DEFAULT']

requirements = cfg.get('requirements', '').split()
dev_requirements = cfg.get('dev_requirements', '').split()
licenses = {'apache2': ('Apache Software License 2.0', 'OSI Approved :: Apache Software License')}
lic = licenses[cfg['license']]

setuptools.setup(
    name=cfg['lib_name'],
    version=cfg['version'],
    description=cfg['description'],
    long_description=(here/'README.md').read_text(encoding='utf-8'),
    long_description_content_type='text/markdown',
    author=cfg['author'],
    author_email=cfg['author_email'],
    license=lic[0],
    classifiers=['Programming Language :: Python :: 3', 'License :: ' + lic[1]],
    keywords=cfg['keywords'],
    python_requires='>=' + cfg['min_python'],
    packages=setuptools.find_packages(include=['eagle3_workbench', 'eagle3_workbench.*']),
    include_package_data=True,
    package_data={'eagle3_workbench': ['zoo_data/*', 'zoo_data/*/*', 'zoo_data/*/*/*', 'zoo_data/*/*/*/*',
                                       'templates/*.ipynb']},
    install_requires=requirements,
    extras_require={
        'dev': dev_requirements,
        # SGLang needs a CUDA machine; nothing in the test suite imports it.
        'sglang': ['sglang>=0.5.6'],
        'bench': ['nnsight'],
    },
    entry_points={
        'console_scripts': cfg.get('console_scripts', '').split(),
        'nbdev': [f"{cfg['lib_path']}={cfg['lib_path']}._modidx:d"],
    },
    zip_safe=False,
)
