"""More organic molecules for the general Hamiltonian model: H/C/N/O SMILES embedded in 3D by RDKit, offline.

ASE's G2 and S22 collections hold about 65 closed-shell H/C/N/O molecules, mostly very small. This list adds 60
common ones that a general model of organic chemistry should have seen: substituted benzenes, five- and six-ring
heteroaromatics, fused rings, carbonyl chemistry (aldehydes, ketones, acids, esters, amides, anhydride, carbamate,
urea), nitriles, oximes, amines, alcohols, ethers, amino acids, a nucleobase and paracetamol. None is an MD17
molecule (malondialdehyde, uracil, aspirin, naphthalene, salicylic acid, toluene; thymine, uracil's 5-methyl
derivative, is left out too) or one of the G2 molecules already listed (:data:`G2_ORGANIC`,
``tests/unit/test_hamiltonian_smiles.py`` checks both by canonical SMILES).

Geometry: RDKit's ETKDG v3 embedding with a fixed seed, then an MMFF94 minimisation (Landrum et al., RDKit;
Riniker & Landrum 2015; Halgren 1996): near-equilibrium starting points like the G2 ones, from which the
generator draws displaced, rotated conformers. Needs ``rdkit`` (``pip install -e ".[quantum]"``).
"""

from __future__ import annotations

import numpy as np

#: name -> SMILES (closed shell, H/C/N/O only)
SMILES_ORGANIC = {
    "benzonitrile": "N#Cc1ccccc1", "aniline": "Nc1ccccc1", "anisole": "COc1ccccc1", "benzaldehyde": "O=Cc1ccccc1",
    "benzoic-acid": "OC(=O)c1ccccc1", "acetophenone": "CC(=O)c1ccccc1", "nitrobenzene": "O=[N+]([O-])c1ccccc1",
    "benzyl-alcohol": "OCc1ccccc1", "hydroquinone": "Oc1ccc(O)cc1", "catechol": "Oc1ccccc1O",
    "4-hydroxypyridine": "Oc1ccncc1", "pyrimidine": "c1cncnc1", "pyridazine": "c1ccnnc1", "imidazole": "c1c[nH]cn1",
    "pyrazole": "c1cc[nH]n1", "oxazole": "c1cocn1", "isoxazole": "c1cnoc1", "triazole": "c1nc[nH]n1",
    "cytosine": "Nc1cc[nH]c(=O)n1", "benzofuran": "c1ccc2occc2c1", "benzimidazole": "c1ccc2[nH]cnc2c1",
    "quinoline": "c1ccc2ncccc2c1", "styrene": "C=Cc1ccccc1", "phenylacetylene": "C#Cc1ccccc1",
    "methyl-benzoate": "COC(=O)c1ccccc1", "paracetamol": "CC(=O)Nc1ccc(O)cc1", "N-methylacetamide": "CNC(C)=O",
    "urea": "NC(N)=O", "formamide": "NC=O", "dimethylformamide": "CN(C)C=O", "glycine": "NCC(=O)O",
    "alanine": "CC(N)C(=O)O", "serine": "NC(CO)C(=O)O", "methyl-acetate": "COC(C)=O", "ethyl-formate": "CCOC=O",
    "acetic-anhydride": "CC(=O)OC(C)=O", "methyl-carbamate": "COC(N)=O", "acrolein": "C=CC=O",
    "acrylic-acid": "C=CC(=O)O", "propanal": "CCC=O", "butanone": "CCC(C)=O", "cyclohexanone": "O=C1CCCCC1",
    "cyclopentanol": "OC1CCCC1", "tetrahydrofuran": "C1CCOC1", "dioxane": "C1COCCO1", "morpholine": "C1COCCN1",
    "piperidine": "C1CCNCC1", "pyrrolidine": "C1CCNC1", "propionitrile": "CCC#N", "malononitrile": "N#CCC#N",
    "acetone-oxime": "CC(C)=NO", "glycolaldehyde": "OCC=O", "lactic-acid": "CC(O)C(=O)O",
    "oxalic-acid": "OC(=O)C(=O)O", "ethylene-glycol": "OCCO", "cyclopentadiene": "C1=CCC=C1",
    "hexatriene": "C=CC=CC=C", "nitroethane": "CC[N+](=O)[O-]", "methyl-isocyanate": "CN=C=O",
    "acetaldehyde-azine": "CC=NN=CC",
}


def smiles_molecule(name: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Atomic numbers (n,) and positions (n, 3) Å of :data:`SMILES_ORGANIC` ``name`` (ETKDG v3 + MMFF94)."""
    try:
        from rdkit import Chem
        from rdkit.Chem import AllChem
    except ImportError:
        raise ImportError("the SMILES molecules need rdkit: pip install -e \".[quantum]\" (or pip install rdkit)") \
            from None
    mol = Chem.AddHs(Chem.MolFromSmiles(SMILES_ORGANIC[name]))
    params = AllChem.ETKDGv3()
    params.randomSeed = seed
    if AllChem.EmbedMolecule(mol, params) != 0:
        raise RuntimeError(f"rdkit could not embed {name!r} ({SMILES_ORGANIC[name]})")
    AllChem.MMFFOptimizeMolecule(mol, maxIters=2000)
    numbers = np.array([a.GetAtomicNum() for a in mol.GetAtoms()], dtype=np.int64)
    return numbers, np.asarray(mol.GetConformer().GetPositions(), dtype=np.float64)
